"""What the torch operator's options and fake implementation are made of,
on the NumPy side: posenc._options (decode_numpy, carried) and
posenc._records.on_stand_ins.  None of it needs torch."""

import numpy as np
import pytest

import posenc
from posenc import _dtypes, _options, _records

# ---------------------------------------------------------------- decode_numpy


def test_decode_numpy_gives_the_numpy_dtype_of_a_dtype_name():
    spec, floats, ints = _options.encode({"dtype": "bfloat16", "base": 10000.0, "n": 3})
    assert _options.decode_numpy(spec, floats, ints) == {
        "dtype": _dtypes.BFLOAT16_BITS,
        "base": 10000.0,
        "n": 3,
    }
    for name in ("float16", "float32", "float64"):
        decoded = _options.decode_numpy(*_options.encode({"dtype": name}))
        assert decoded["dtype"] == np.dtype(name) and isinstance(decoded["dtype"], np.dtype)


def test_decode_numpy_gives_a_fresh_dict_each_time():
    spec, floats, ints = _options.encode({"n": 3, "layout": "half"})
    first = _options.decode_numpy(spec, floats, ints)
    first["n"] = 4
    del first["layout"]
    assert _options.decode_numpy(spec, floats, ints) == {"n": 3, "layout": "half"}


# ---------------------------------------------------------------- carried


def test_carried_makes_the_arrays_lists_and_leaves_the_rest():
    scaling = {"rope_type": "linear", "factor": 2.0}
    options = {
        "sections": np.array([16, 24, 24]),
        "offset": np.array(3),  # 0-d: a number, left to the encoder
        "scaling": scaling,
        "layer_type": None,
    }
    carried = _options.carried(options, (np.ndarray,))
    assert carried["sections"] == [16, 24, 24] and type(carried["sections"]) is list
    assert carried["offset"] is options["offset"] and carried["scaling"] is scaling
    assert "scaling_json" not in carried and carried["layer_type"] is None


def test_carried_gives_a_config_object_as_the_text_decode_reads_back():
    LlamaConfig = pytest.importorskip("transformers").LlamaConfig

    config = LlamaConfig(
        hidden_size=64,
        num_attention_heads=4,
        rope_parameters={"rope_type": "linear", "rope_theta": 500000.0, "factor": 4.0},
    )
    carried = _options.carried({"scaling": config, "layer_type": None}, (np.ndarray,))
    assert "layer_type" not in carried and carried["scaling_json"] is True
    decoded = _options.decode(*_options.encode(carried))
    assert "scaling_json" not in decoded
    # the same frequencies as the config itself gives: base 500000, divided by 4
    params = decoded["scaling"]["rope_parameters"]
    assert params["rope_type"] == "linear" and params["factor"] == 4.0
    want = 1.0 / 500000.0 ** (np.arange(0, 16, 2) / 16) / 4.0
    got = posenc.rope_frequencies(16, scaling=decoded["scaling"])[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)


# ---------------------------------------------------------------- on_stand_ins


def test_on_stand_ins_gives_the_result_of_a_call_on_arrays_of_those_shapes():
    f32 = np.dtype(np.float32)
    result = _records.on_stand_ins("alibi_bias", {"n_heads": 4, "q_len": 3, "k_len": 5}, {})
    assert result.shape == (4, 3, 5) and result.dtype == f32
    # kerple_bias refuses zeros (its parameters must be positive): ones then
    arrays = {"r1": ((2,), f32), "r2": ((2,), f32)}
    result = _records.on_stand_ins("kerple_bias", {"q_len": 3, "k_len": 5}, arrays)
    assert result.shape == (2, 3, 5) and result.dtype == f32
    with pytest.raises(ValueError, match="r1 must be > 0"):
        posenc.kerple_bias(np.zeros(2, f32), np.ones(2, f32), 3, 5)


def test_on_stand_ins_passes_on_what_ones_do_not_fix():
    f32 = np.dtype(np.float32)
    arrays = {"r1": ((2,), f32), "r2": ((3,), f32)}
    with pytest.raises(ValueError, match="r2"):
        _records.on_stand_ins("kerple_bias", {"q_len": 3, "k_len": 5}, arrays)
