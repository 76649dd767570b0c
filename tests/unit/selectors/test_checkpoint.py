"""Saved selectors verify their files: SHA-256 in config.json, safetensors headers, NaN scores."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from tests.conftest import TINY_PROTOTYPE

from chunksel.errors import DataError
from chunksel.selectors import load_selector
from chunksel.selectors.base import Selector
from chunksel.selectors.checkpoint import (
    check_safetensors_header,
    load_state_dict_checked,
    sha256_file,
    state_checksums,
)
from chunksel.types import Candidate, Instance, Question


class TwoFileSelector(Selector):
    """Writes two state files (one in a sub-folder) and scores with the numbers they hold."""

    name = "two-file"
    requires_fit = False

    def __init__(self, bias: float = 0.0) -> None:
        self.bias = bias

    def _save_state(self, path):
        (path / "weights.txt").write_text("1 2 3")
        (path / "extra").mkdir()
        (path / "extra" / "table.txt").write_text("0.5")

    def _load_state(self, path, state):
        self.w_ = [float(x) for x in (path / "weights.txt").read_text().split()]
        self.t_ = float((path / "extra" / "table.txt").read_text())

    def _score(self, batch, features, k):
        return np.array([[self.w_[j % 3] * self.t_ + self.bias for j in range(k)] for _ in batch])


class NaNSelector(TwoFileSelector):
    name = "nan"

    def _score(self, batch, features, k):
        out = np.zeros((len(batch), k))
        out[-1, 1] = np.nan
        return out


def _inst(n: int, qid: str = "q") -> Instance:
    return Instance(Question(qid, "q?"), [Candidate(f"{qid}-p{i}", "t", rank=i) for i in range(n)])


def test_save_records_a_checksum_of_every_state_file(tmp_path):
    TwoFileSelector(bias=1.0).save(tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert cfg["checksums"] == {
        "extra/table.txt": sha256_file(tmp_path / "m" / "extra" / "table.txt"),
        "weights.txt": sha256_file(tmp_path / "m" / "weights.txt"),
    }
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["config.json", "extra", "weights.txt"]  # no staging left
    loaded = TwoFileSelector.load(tmp_path / "m")
    assert loaded.w_ == [1.0, 2.0, 3.0] and loaded.t_ == 0.5 and loaded.bias == 1.0
    assert state_checksums(tmp_path / "m" / "extra") == {"table.txt": cfg["checksums"]["extra/table.txt"]}


def test_a_changed_or_missing_state_file_is_a_corrupt_checkpoint(tmp_path):
    TwoFileSelector().save(tmp_path / "m")
    (tmp_path / "m" / "extra" / "table.txt").write_text("0.6")
    with pytest.raises(DataError, match=r"corrupt checkpoint .*table\.txt: SHA-256 .* does not match"):
        TwoFileSelector.load(tmp_path / "m")
    (tmp_path / "m" / "extra" / "table.txt").unlink()
    with pytest.raises(DataError, match=r"corrupt checkpoint .*: extra/table\.txt is missing"):
        TwoFileSelector.load(tmp_path / "m")


def test_saves_without_checksums_still_load(tmp_path):
    TwoFileSelector().save(tmp_path / "m")
    cfg_path = tmp_path / "m" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    del cfg["checksums"]
    cfg_path.write_text(json.dumps(cfg))
    (tmp_path / "m" / "weights.txt").write_text("4 5 6")  # nothing to check it against
    assert TwoFileSelector.load(tmp_path / "m").w_ == [4.0, 5.0, 6.0]
    cfg["checksums"] = ["weights.txt"]
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(DataError, match="'checksums' must map"):
        TwoFileSelector.load(tmp_path / "m")


def test_nan_scores_are_refused_never_picked():
    sel = NaNSelector()
    sel.w_, sel.t_ = [1.0], 1.0
    with pytest.raises(DataError, match=r"scored NaN for candidate 'b-p1' of instance 'b'"):
        sel.score([_inst(3, "a"), _inst(3, "b")])
    with pytest.raises(DataError, match="NaN"):
        sel.select([_inst(3, "a"), _inst(3, "b")])
    # NaN at a padded slot is no score at all: it is -inf like every padded slot
    assert np.isneginf(sel.score([_inst(3, "a"), _inst(1, "b")])[1, 1])


# ------------------------------------------------------------- real weights
@pytest.fixture
def saved_prototype(tmp_path, toy_instances, one_thread):
    pytest.importorskip("torch")
    from chunksel.features.base import InMemoryFeatures
    from chunksel.selectors.prototype import PrototypeSelector

    ids = [i.id for i in toy_instances]
    feats = InMemoryFeatures(ids, h=np.ones((len(ids), 3)), r=np.ones((len(ids), 2)))
    sel = PrototypeSelector(**{**TINY_PROTOTYPE, "max_epochs": 2}).fit(toy_instances[:10], feats)
    sel.save(tmp_path / "m")
    return tmp_path / "m", toy_instances, feats


def _nan_in_the_middle(file):
    """Overwrite 64 bytes in the middle of the tensor data with 0xff (NaN as float32)."""
    data = bytearray(file.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    mid = 8 + n + (len(data) - 8 - n) // 2
    data[mid : mid + 64] = b"\xff" * 64
    file.write_bytes(bytes(data))


def test_weights_corrupted_in_the_middle_are_refused_at_load(saved_prototype):
    path, insts, feats = saved_prototype
    cfg = json.loads((path / "config.json").read_text())
    assert set(cfg["checksums"]) == {"model.safetensors"}
    assert np.isfinite(load_selector(path).score(insts[:3], feats)[:2]).all()  # intact: loads and scores
    _nan_in_the_middle(path / "model.safetensors")
    with pytest.raises(DataError, match=r"corrupt checkpoint .*model\.safetensors: SHA-256"):
        load_selector(path)


def test_an_old_save_with_corrupt_weights_scores_nan_and_picks_nothing(saved_prototype):
    path, insts, feats = saved_prototype
    cfg = json.loads((path / "config.json").read_text())
    del cfg["checksums"]
    (path / "config.json").write_text(json.dumps(cfg))
    _nan_in_the_middle(path / "model.safetensors")
    sel = load_selector(path)  # nothing to detect the damage at load time
    with pytest.raises(DataError, match="scored NaN"):
        sel.select(insts[:3], feats)
    from chunksel.pipeline.chunk_selector import ChunkSelector

    e = np.stack([c.embedding for c in insts[0].candidates])
    with pytest.raises(DataError, match="scored NaN"):
        ChunkSelector(sel).select("q?", chunk_embeddings=e, features={"h": np.ones(3), "r": np.ones(2)})


def test_safetensors_header_is_checked(saved_prototype):
    path, _, _ = saved_prototype
    file = path / "model.safetensors"
    header = check_safetensors_header(file)
    assert any(k.startswith("model.") for k in header)
    cfg = json.loads((path / "config.json").read_text())
    del cfg["checksums"]  # an old save: the header check is what catches a truncated file
    (path / "config.json").write_text(json.dumps(cfg))
    data = file.read_bytes()
    file.write_bytes(data[:-100])
    with pytest.raises(DataError, match=r"corrupt checkpoint .*model\.safetensors: .*truncated"):
        load_selector(path)
    file.write_bytes(data + b"junk")
    with pytest.raises(DataError, match="bytes after the last tensor"):
        check_safetensors_header(file)
    file.write_bytes(struct.pack("<Q", 10) + b"not json!!" + b"\x00" * 4)
    with pytest.raises(DataError, match="not valid JSON"):
        check_safetensors_header(file)
    file.write_bytes(b"\x01\x02")
    with pytest.raises(DataError, match="too short"):
        check_safetensors_header(file)


def test_state_dict_mismatch_names_the_file_and_the_keys(saved_prototype):
    path, _, _ = saved_prototype
    cfg = json.loads((path / "config.json").read_text())
    cfg["params"]["hidden"] = 16  # the weights were saved with hidden=32
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(DataError) as err:
        load_selector(path)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"corrupt checkpoint {path / 'model.safetensors'}: ")
    assert "shape mismatch: " in msg and "[32, " in msg and "in the file" in msg


def test_load_state_dict_checked_lists_missing_and_unexpected_keys(tmp_path):
    torch = pytest.importorskip("torch")
    net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))
    state = {k: v.clone() for k, v in net.state_dict().items()}
    state["extra.weight"] = torch.zeros(1)
    del state["1.bias"]
    with pytest.raises(DataError, match=r"^corrupt checkpoint w\.st: .*missing keys: 1\.bias; unexpected keys: extra\.weight$"):
        load_state_dict_checked(net, state, "w.st")
    good = {k: v.clone() for k, v in net.state_dict().items()}
    load_state_dict_checked(net, good, "w.st")  # no error


def test_neural_selector_weights_are_verified(tmp_path, toy_instances, one_thread):
    pytest.importorskip("torch")
    from chunksel.selectors import make_selector

    sel = make_selector("knrm", embedding_init="random", embedding_dim=8, max_doc_len=16, max_epochs=1, progress=False)
    sel.fit([i for i in toy_instances if i.split == "train"])
    sel.save(tmp_path / "k")
    np.testing.assert_array_equal(load_selector(tmp_path / "k").score(toy_instances[:4]), sel.score(toy_instances[:4]))
    cfg_path = tmp_path / "k" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["params"]["n_kernels"] = 5  # the saved linear layer takes 11 kernels
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(DataError, match=r"corrupt checkpoint .*model\.safetensors: .*shape mismatch: .*\[1, 11\] in the file"):
        load_selector(tmp_path / "k")
    _nan_in_the_middle(tmp_path / "k" / "model.safetensors")
    with pytest.raises(DataError, match=r"corrupt checkpoint .*model\.safetensors: SHA-256"):
        load_selector(tmp_path / "k")


def test_a_damaged_lightgbm_model_file_is_a_corrupt_checkpoint(tmp_path):
    pytest.importorskip("lightgbm")
    from chunksel.selectors.ltr import LambdaMARTSelector

    folder = tmp_path / "lm"
    folder.mkdir()
    (folder / "model.txt").write_text("tree\nversion=v4\nnum_class=banana\n")
    from chunksel.selectors.letor import FEATURE_NAMES

    sel = LambdaMARTSelector()
    with pytest.raises(DataError, match=r"corrupt checkpoint .*model\.txt: "):
        sel._load_state(folder, {"feature_names": list(FEATURE_NAMES)})
