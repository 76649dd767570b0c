"""Settings passed all the way down: the bench's label and a worker's options come from the
settings it is given, a profile override with a typo is an error, and a question without
its embedding is an error that names the fix."""

from __future__ import annotations

import pytest
from tests.conftest import make_toy_instances

from chunksel.errors import ConfigError, DataError
from chunksel.settings import Settings
from chunksel.study.profiles import Profile
from chunksel.study.run import check_overrides, worker_command


def test_a_mistyped_override_is_an_error_naming_the_known_settings():
    check_overrides(Profile("ok", limit=1, seeds=(0,), budgets=(), overrides={"lambdamart": {"n_estimators": 5}}))
    with pytest.raises(ConfigError, match=r"unknown setting\(s\) 'n_estimator' for selector 'lambdamart'; known: .*n_estimators"):
        check_overrides(Profile("typo", limit=1, seeds=(0,), budgets=(), overrides={"lambdamart": {"n_estimator": 5}}))
    with pytest.raises(ConfigError, match="unknown selector 'lambdamrt'"):
        check_overrides(Profile("typo", limit=1, seeds=(0,), budgets=(), overrides={"lambdamrt": {}}))


def test_a_worker_gets_the_settings_it_is_given_not_the_ambient_ones(tmp_path):
    given = Settings(data_root=str(tmp_path / "data"), cache_dir=str(tmp_path / "cache"), label="containment|gold")
    cmd = worker_command("triviaqa", "quick", ["nq"], ["retrieval"], "out", 0, 1, "grouped", given)
    assert cmd[-6:] == ["--data-root", str(tmp_path / "data"), "--cache", str(tmp_path / "cache"),
                        "--label", "containment|gold"]


def test_a_question_without_its_embedding_is_an_error_that_names_the_fix():
    from chunksel.selectors.embedding_arrays import embedding_arrays

    insts = make_toy_instances(n=3)
    insts[1].question.embedding = None
    with pytest.raises(DataError, match=r"1 question\(s\) without an embedding \(first: 'toy:q:1'\).*question_embedding="):
        embedding_arrays(insts, 5, who="the anchored selector")
