"""Under ``bench --jobs N --threads T`` the stages the whole study's process runs alone
(generator features, pooled and cross-encoder training) get N * T threads; a worker and a
run without --jobs or --threads keep theirs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(("jobs", "threads", "part_of", "inside"), [
    (2, 1, None, 2), (3, 2, None, 6), (2, 1, "triviaqa", None), (1, 1, None, None), (2, None, None, None),
])
def test_stages_run_alone_use_the_idle_cores(jobs, threads, part_of, inside):
    from chunksel.study.run import _alone
    from chunksel.threads import limit_threads

    with limit_threads(1):
        with _alone(jobs, threads, part_of):
            got = torch.get_num_threads()
        assert torch.get_num_threads() == 1  # restored
    assert got == (inside or 1)
