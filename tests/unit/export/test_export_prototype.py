"""ONNX export of the prototype selector and the onnxruntime engine (real ONNX Runtime)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from tests.conftest import TINY_PROTOTYPE  # noqa: E402

from chunksel.errors import ConfigError, DataError  # noqa: E402
from chunksel.export.prototype import OnnxPrototype, export_prototype, prototype_graph  # noqa: E402
from chunksel.features.base import InMemoryFeatures  # noqa: E402
from chunksel.selectors.prototype import PrototypeSelector  # noqa: E402

TINY = TINY_PROTOTYPE
D_H, D_R = 6, 10
pytestmark = pytest.mark.usefixtures("one_thread")


def feats_for(instances, seed=0):
    rng = np.random.default_rng(seed)
    ids = [i.id for i in instances]
    # hidden states with a few large dims, as a real generator's have
    h = rng.normal(size=(len(ids), D_H)) * np.array([1, 1, 1, 1, 30, 0.01])
    return InMemoryFeatures(ids, h=h, r=rng.normal(size=(len(ids), D_R)))


def arrays(insts, feats):
    got = feats.lookup([i.id for i in insts])
    e = np.zeros((len(insts), 5, 8), dtype=np.float32)
    m = np.zeros((len(insts), 5), dtype=bool)
    for b, inst in enumerate(insts):
        for k, c in enumerate(inst.candidates[:5]):
            e[b, k], m[b, k] = c.embedding, True
    return got["h"], got["r"], e, m


@pytest.fixture
def fitted(toy_instances):
    feats = feats_for(toy_instances)
    sel = PrototypeSelector(**TINY, generator_id="gen-x", encoder_id="enc-y").fit(toy_instances, feats)
    return sel, toy_instances, feats


def test_fp32_export_matches_torch_scores(fitted, tmp_path):
    sel, insts, feats = fitted
    path = export_prototype(sel, tmp_path / "m.onnx")
    runner = OnnxPrototype(path)
    h, r, e, m = arrays(insts, feats)
    scores, proto = runner(h, r, e)
    want = sel.score(insts, feats)
    assert scores.shape == want.shape == (len(insts), 5)
    np.testing.assert_array_equal(np.isneginf(scores), ~m)  # padded slots are -inf in the graph
    np.testing.assert_allclose(scores[m], want[m], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(proto, axis=1), 1.0, atol=1e-5)
    meta = runner.metadata
    assert meta["quantize"] == "fp32" and meta["generator_id"] == "gen-x" and meta["encoder_id"] == "enc-y"
    assert json.loads(meta["layout"]) == sel.layout_.to_dict()
    assert runner.input_names == ["h", "r", "e"]


@pytest.mark.parametrize("blocks", ["chunk", "hs+rw", "rw+chunk"])
def test_ablation_exports_take_only_their_inputs(toy_instances, blocks):
    feats = feats_for(toy_instances)
    sel = PrototypeSelector(blocks=blocks, **TINY).fit(toy_instances, feats)
    runner = OnnxPrototype(prototype_graph(sel))
    want_inputs = [n for b, n in (("hs", "h"), ("rw", "r")) if b in sel.blocks] + ["e"]
    assert runner.input_names == want_inputs
    h, r, e, m = arrays(toy_instances, feats)
    np.testing.assert_allclose(runner(h, r, e)[0][m], sel.score(toy_instances, feats)[m], rtol=1e-4, atol=1e-5)


def test_budget_mask_is_applied_in_the_graph(toy_instances):
    feats = feats_for(toy_instances)
    sel = PrototypeSelector(budget=30, **TINY).fit(toy_instances, feats)
    assert sel.kept_dims < sel.layout_.dim
    h, r, e, m = arrays(toy_instances, feats)
    for quantize in ("fp32", "int8"):
        runner = OnnxPrototype(prototype_graph(sel, quantize))
        assert runner.metadata["kept_dims"] == str(sel.kept_dims)
        tol = 1e-5 if quantize == "fp32" else 0.05
        np.testing.assert_allclose(runner(h, r, e)[0][m], sel.score(toy_instances, feats)[m], atol=tol)


def test_int8_matches_onnxruntime_quantize_dynamic_at_batch_one(fitted, tmp_path):
    """At batch 1 per-row and per-tensor activation ranges coincide: the int8 graph must
    compute what ONNX Runtime's own dynamic quantiser makes of the fp32 graph."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    sel, insts, feats = fitted
    # the reference quantiser sees the scaler in front of the first MatMul, like the int8 graph
    fp = prototype_graph(sel, "fp32")
    i8 = OnnxPrototype(prototype_graph(sel, "int8"))
    unfolded = _fp32_graph_with_scaler_in_front(sel)
    import onnx

    onnx.save(unfolded, tmp_path / "fp32.onnx")
    from chunksel.export.ops import int8_kernels_saturate

    quantize_dynamic(tmp_path / "fp32.onnx", tmp_path / "ref.onnx", per_channel=True,
                     weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
                     reduce_range=int8_kernels_saturate(),  # the range the int8 graph takes on this CPU
                     nodes_to_quantize=[n.name for n in unfolded.graph.node if n.name.startswith("mlp")])
    ref = ort.InferenceSession(str(tmp_path / "ref.onnx"), providers=["CPUExecutionProvider"])
    assert any(n.op_type in ("DynamicQuantizeLinear", "DynamicQuantizeMatMul", "MatMulInteger")
               for n in onnx.load(tmp_path / "ref.onnx").graph.node)
    h, r, e, m = arrays(insts, feats)
    fp_scores = OnnxPrototype(fp)(h, r, e)[0]
    for b in range(len(insts)):
        got = i8(h[b:b + 1], r[b:b + 1], e[b:b + 1])[0]
        want = ref.run(["scores"], {"h": h[b:b + 1].astype(np.float32), "r": r[b:b + 1].astype(np.float32),
                                    "e": e[b:b + 1]})[0]
        mb = m[b:b + 1]
        np.testing.assert_allclose(got[mb], want[mb], atol=2e-3)
        assert not np.allclose(got[mb], fp_scores[b:b + 1][mb], atol=1e-7)  # really quantised


def _fp32_graph_with_scaler_in_front(sel):
    """The fp32 MLP with the scaler as its own Sub/Mul and named MatMuls (the reference)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    lay = sel.layout_
    folded = sel.model_.fold_batchnorm().net
    lins = [mod for mod in folded if isinstance(mod, torch.nn.Linear)]
    init = lambda name, a: numpy_helper.from_array(np.asarray(a, dtype=np.float32), name)  # noqa: E731
    inits = [init("mean", sel.scaler_.mean_), init("inv", 1 / sel.scaler_.scale_),
             numpy_helper.from_array(np.array([-1, lay.k * lay.d_e], dtype=np.int64), "shape"),
             numpy_helper.from_array(np.array([2], dtype=np.int64), "ax"), init("eps", 1e-12)]
    nodes = [helper.make_node("Reshape", ["e", "shape"], ["ef"]),
             helper.make_node("Concat", ["h", "r", "ef"], ["x"], axis=1),
             helper.make_node("Sub", ["x", "mean"], ["xc"]), helper.make_node("Mul", ["xc", "inv"], ["a0"])]
    for i, lin in enumerate(lins):
        inits += [init(f"W{i}", lin.weight.detach().numpy().T), init(f"b{i}", lin.bias.detach().numpy())]
        nodes += [helper.make_node("MatMul", [f"a{i}", f"W{i}"], [f"m{i}"], name=f"mlp{i}"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"z{i}"])]
        nodes.append(helper.make_node("Relu" if i < len(lins) - 1 else "Identity", [f"z{i}"], [f"a{i + 1}"]))
    y = f"a{len(lins)}"
    nodes += [helper.make_node("ReduceL2", [y], ["n"], axes=[1], keepdims=1),
              helper.make_node("Max", ["n", "eps"], ["n1"]), helper.make_node("Div", [y, "n1"], ["p"]),
              helper.make_node("Unsqueeze", ["p", "ax"], ["p3"]), helper.make_node("MatMul", ["e", "p3"], ["d"]),
              helper.make_node("Squeeze", ["d", "ax"], ["scores"])]
    graph = helper.make_graph(
        nodes, "ref",
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["n", lay.d_h]),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, ["n", lay.d_r]),
         helper.make_tensor_value_info("e", TensorProto.FLOAT, ["n", lay.k, lay.d_e])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n", lay.k])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_int8_scores_do_not_depend_on_the_batch(fitted):
    sel, insts, feats = fitted
    runner = OnnxPrototype(prototype_graph(sel, "int8"))
    h, r, e, m = arrays(insts, feats)
    batch = runner(h, r, e)[0]
    # one row runs the DynamicQuantizeLinear branch, a batch the per-row branch: same numbers
    one_by_one = np.concatenate([runner(h[b:b + 1], r[b:b + 1], e[b:b + 1])[0] for b in range(len(insts))])
    np.testing.assert_array_equal(batch, one_by_one)
    pairs = np.concatenate([runner(h[b:b + 2], r[b:b + 2], e[b:b + 2])[0] for b in range(0, len(insts) - 1, 2)])
    np.testing.assert_array_equal(batch[: len(pairs)], pairs)
    graph = prototype_graph(sel, "int8").graph
    branch = next(n for n in graph.node if n.op_type == "If")
    ops = {a.name: {n.op_type for n in a.g.node} for a in branch.attribute}
    assert "DynamicQuantizeLinear" in ops["then_branch"] and "DynamicQuantizeLinear" not in ops["else_branch"]
    n_linear = sum(isinstance(mod, torch.nn.Linear) for mod in sel.model_.modules())
    assert sum(t.data_type == 3 for t in graph.initializer) == n_linear  # one copy of the int8 weights
    fp = OnnxPrototype(prototype_graph(sel, "fp32"))(h, r, e)[0]
    assert np.abs(batch[m] - fp[m]).max() < 0.05


def test_selector_onnxruntime_engine(fitted, tmp_path):
    sel, insts, feats = fitted
    sel.save(tmp_path / "m")
    fp = sel.score(insts, feats)
    on = PrototypeSelector.load(tmp_path / "m", engine="onnxruntime")
    got = on.score(insts, feats)
    real = np.isfinite(fp)
    np.testing.assert_array_equal(real, np.isfinite(got))
    np.testing.assert_allclose(got[real], fp[real], rtol=1e-4, atol=1e-5)
    assert [s.indices for s in on.select(insts, feats, k=2)] == [s.indices for s in sel.select(insts, feats, k=2)]
    x = sel.layout_.assemble(*arrays(insts, feats)[:2], arrays(insts, feats)[2])
    np.testing.assert_allclose(on.prototypes(x), sel.prototypes(x), atol=1e-5)
    q = PrototypeSelector.load(tmp_path / "m", quantize="int8", engine="onnxruntime")
    i8 = q.score(insts, feats)
    assert np.abs(i8[real] - fp[real]).max() < 0.05 and not np.array_equal(i8, fp)
    # explicit masks are honoured by the engine as by the torch path
    h, r, e, m = arrays(insts[:2], feats)
    m[:, 1] = False
    np.testing.assert_array_equal(np.isneginf(on.score_arrays(h, r, e, m)), ~m)
    np.testing.assert_array_equal(np.isneginf(sel.score_arrays(h, r, e, m)), ~m)
    # a 0/1 list mask of one instance; an all-true mask is no mask
    one = on.score_arrays(h[0], r[0], e[0], [1, 0, 1, 1, 1])
    assert one.shape == (1, 5) and np.isneginf(one).tolist() == [[False, True, False, False, False]]
    np.testing.assert_array_equal(on.score_arrays(h, r, e, np.ones((2, 5), bool)), on.score_arrays(h, r, e))
    # fewer than K candidates, no mask: scores for those only, as the torch path gives
    few = on.score_arrays(h, r, e[:, :3])
    assert few.shape == (2, 3)
    np.testing.assert_allclose(few, sel.score_arrays(h, r, e[:, :3]), rtol=1e-4, atol=1e-5)
    # one instance as 1-D/2-D arrays
    np.testing.assert_allclose(on.score_arrays(h[0], r[0], e[0]), sel.score_arrays(h[0], r[0], e[0]), atol=1e-5)
    with pytest.raises(ConfigError, match="torch-engine"):
        PrototypeSelector.load(tmp_path / "m", quantize="int8w", engine="onnxruntime")
    with pytest.raises(ConfigError, match="engine must be"):
        PrototypeSelector.load(tmp_path / "m", engine="tensorrt")


def test_bad_inputs_and_files(fitted, tmp_path):
    sel, insts, feats = fitted
    runner = OnnxPrototype(prototype_graph(sel))
    h, r, e, _ = arrays(insts, feats)
    with pytest.raises(DataError, match=r"\(n, 5, 8\)"):
        runner(h, r, e[:, :3])
    with pytest.raises(DataError, match="h has 5 dims, the model expects 6"):
        runner(h[:, :5], r, e)
    with pytest.raises(DataError, match="pass r"):
        runner(h, None, e)
    with pytest.raises(ConfigError, match="fp32 or int8"):
        prototype_graph(sel, "int8w")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf")
    with pytest.raises(DataError, match="corrupt ONNX model"):
        OnnxPrototype(bad)
    with pytest.raises(DataError, match="no ONNX model"):
        OnnxPrototype(tmp_path / "missing.onnx")
    path = export_prototype(sel, tmp_path / "ok.onnx")
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    with pytest.raises(DataError, match="corrupt ONNX model"):
        OnnxPrototype(path)


def test_runner_needs_neither_torch_nor_onnx(fitted, tmp_path):
    """An edge application: numpy + onnxruntime + the .onnx file."""
    import subprocess
    import sys

    sel, insts, feats = fitted
    path = export_prototype(sel, tmp_path / "m.onnx", quantize="int8")
    h, r, e, m = arrays(insts[:2], feats)
    np.savez(tmp_path / "in.npz", h=h, r=r, e=e)
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['onnx'] = None\n"
        "import numpy as np\n"
        "from chunksel.export.prototype import OnnxPrototype\n"
        f"d = np.load({str(tmp_path / 'in.npz')!r})\n"
        f"run = OnnxPrototype({str(path)!r}, threads=1)\n"
        "np.save(sys.argv[1], run(d['h'], d['r'], d['e'])[0])\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "out.npy")], check=True)
    got = np.load(tmp_path / "out.npy")
    np.testing.assert_allclose(got, OnnxPrototype(path)(h, r, e)[0], rtol=0, atol=1e-6)


def test_the_export_entry_point_writes_the_declared_graph(fitted, tmp_path):
    """chunksel.export.export_selector picks the prototype graph from the class's onnx_graph."""
    from chunksel.export import export_selector, open_graph

    sel, insts, feats = fitted
    path = export_selector(sel, tmp_path / "m.onnx", quantize="int8")
    runner = open_graph("prototype", path)
    assert isinstance(runner, OnnxPrototype) and runner.quantize == "int8"
    assert path.read_bytes() == prototype_graph(sel, "int8").SerializeToString()
    scores, _ = runner(*arrays(insts, feats)[:3])
    assert scores.shape == (len(insts), 5)


def test_int8_weights_take_the_reduced_range_where_the_kernels_saturate():
    """x86 without VNNI adds two u8 x s8 products into an int16 (255 x 127 x 2 overflows it):
    there the weights take ONNX Runtime's reduced range, |q| <= 64, elsewhere the full one."""
    from chunksel.export.ops import GraphBuilder, int8_kernels_saturate, int8_layer, int8_weight_max

    assert int8_weight_max(True) == 64 and int8_weight_max(False) == 127
    assert int8_weight_max() == (64 if int8_kernels_saturate() else 127)
    assert 255 * int8_weight_max(True) * 2 <= np.iinfo(np.int16).max < 255 * int8_weight_max(False) * 2
    w = np.random.default_rng(0).normal(size=(8, 16)).astype(np.float32)
    for reduce, top in ((True, 64), (False, 127)):
        g = GraphBuilder()
        layer = int8_layer(g, w, np.zeros(8, np.float32), nonnegative=True, reduce_range=reduce)
        q = next(t for t in g.inits if t.name == layer.wq)
        from onnx import numpy_helper

        assert np.abs(numpy_helper.to_array(q)).max() == top  # each column's largest weight maps to the top
