"""Local-DUET: the local (exact-match) sub-model of DUET (Mitra et al., WWW 2017,
"Learning to Match using Local and Distributed Representations of Text for Web
Search").

The input is the binary interaction matrix ``X_ij = 1[q_i == d_j]`` of a query cut/padded
to ``max_query_len`` terms and a document cut/padded to ``max_doc_len`` terms (here
word-piece ids; padding never matches). The local model convolves over the rows with
``n_filters`` filters spanning the whole document (window ``max_doc_len x 1``; one
output per query term and filter), then tanh, flattens, and applies fully-connected
layers ``hidden -> hidden -> dropout -> 1`` (tanh activations), as in the paper (300
filters, 300 hidden units; the paper used 10 query and 1000 document terms). Being
position-aware, it needs fixed lengths; no word embeddings are used.
"""

from __future__ import annotations

import torch
from torch import nn


class LocalDuet(nn.Module):
    """DUET's local model over exact-match matrices.

    Args:
        max_query_len, max_doc_len: the fixed matrix size.
        n_filters: convolution filters (each spans one query term's full row).
        hidden: width of the two fully-connected layers.
        dropout: dropout before the output layer.
    """

    #: position-aware: inputs keep their full padded lengths (no trimming)
    fixed_lengths = True

    def __init__(
        self,
        max_query_len: int = 20,
        max_doc_len: int = 200,
        n_filters: int = 300,
        hidden: int = 300,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        self.max_query_len = max_query_len
        self.max_doc_len = max_doc_len
        # Conv1d with the document positions as input channels and the query terms as the
        # sequence axis == a (max_doc_len x 1) window sliding over the query terms
        self.conv = nn.Conv1d(max_doc_len, n_filters, kernel_size=1)
        self.fc = nn.Sequential(
            nn.Flatten(),
            nn.Linear(n_filters * max_query_len, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Dropout(dropout),
            nn.Linear(hidden, 1),
        )

    @staticmethod
    def interaction(
        q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor, d_mask: torch.Tensor
    ) -> torch.Tensor:
        """(N, Lq, Ld) float exact-match matrix."""
        x = (q[:, :, None] == d[:, None, :]) & q_mask[:, :, None] & d_mask[:, None, :]
        return x.float()

    def forward(
        self, q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor, d_mask: torch.Tensor
    ) -> torch.Tensor:
        """(N,) scores; ``q`` must be (N, max_query_len) and ``d`` (N, max_doc_len)."""
        if q.shape[1] != self.max_query_len or d.shape[1] != self.max_doc_len:
            raise ValueError(
                f"LocalDuet expects ({self.max_query_len}, {self.max_doc_len}) terms, "
                f"got ({q.shape[1]}, {d.shape[1]})"
            )
        x = self.interaction(q, q_mask, d, d_mask)  # (N, Lq, Ld)
        h = torch.tanh(self.conv(x.transpose(1, 2)))  # (N, n_filters, Lq)
        return self.fc(h).squeeze(-1)
