"""chunksel.study: the benchmark study behind ``chunksel bench`` (``make bench``).

One module per stage, above ``eval/`` (the numpy-only metrics, significance and cost
measurement every caller uses) and the selectors: :mod:`.profiles` (profiles, dataset
order, ablation variants), :mod:`.memo` (the result memo), :mod:`.state` (what the stages
share), :mod:`.table1`, :mod:`.paper` (Tables 2-3), :mod:`.ablations` (generator ablation,
significance), :mod:`.pooled`, :mod:`.curves`, :mod:`.llm_table` (Table 5),
:mod:`.answers` (Table 4, through :mod:`.answer_table`), :mod:`.abstention`, :mod:`.run` (``run_bench``,
``run_study``, the ``bench --jobs`` workers), and the report:
:mod:`.results` / :mod:`.records` (typed results), :mod:`.report`, :mod:`.tables`,
:mod:`.targets`, :mod:`.headline`, :mod:`.generation_tables`, :mod:`.format`, :mod:`.plots`; :mod:`.compare`
(are two results the same figures?). Beside the study: :mod:`.pretrain` (the recipe of
the shipped pretrained selectors) and the zero-shot report, :mod:`.zeroshot_data`,
:mod:`.zeroshot`, :mod:`.zeroshot_report`.

Importing the package imports nothing (the results and report modules need numpy only).
"""
