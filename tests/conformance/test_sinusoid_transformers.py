"""sinusoid() against the sinusoidal tables of transformers' own models:
DistilBERT/XLM (interleaved) and Marian (sines, then cosines)."""

import numpy as np
import pytest

import posenc

SIZES = [(512, 768), (64, 10), (1024, 64), (3, 2)]


@pytest.mark.parametrize("n_pos, dim", SIZES)
def test_interleaved_equals_distilbert_table(torch, transformers, n_pos, dim):
    from transformers.models.distilbert import modeling_distilbert

    theirs = torch.empty(n_pos, dim)
    modeling_distilbert._create_sinusoidal_embeddings(n_pos=n_pos, dim=dim, out=theirs)
    ours = posenc.sinusoid(n_pos, dim)
    np.testing.assert_array_max_ulp(ours, theirs.numpy(), maxulp=1)


@pytest.mark.parametrize("n_pos, dim", SIZES)
def test_concat_equals_marian_table(torch, transformers, n_pos, dim):
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    theirs = MarianSinusoidalPositionalEmbedding(n_pos, dim).create_weight()
    ours = posenc.sinusoid(n_pos, dim, layout="concat")
    np.testing.assert_array_max_ulp(ours, theirs.numpy(), maxulp=1)
