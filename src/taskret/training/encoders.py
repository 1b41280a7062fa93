"""The encoders every learned retriever starts from (EPR's dual encoder, TART-dual)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["build_bi_encoder"]


def build_bi_encoder(base_model: str, *, shared_encoder: bool = True, max_seq_length: int = 256,
                     device: str | None = None) -> "SentenceTransformer":
    """The untrained dual encoder: a Router of two copies of ``base_model`` (query and document encoders),
    or the base itself when ``shared_encoder``; a registered name or a local folder."""
    import copy

    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Router

    from ..models import resolve_model

    base = SentenceTransformer(str(resolve_model(base_model)), device=device or "cpu")
    if shared_encoder:
        model = base
    else:
        modules = list(base.children())
        router = Router.for_query_document(
            query_modules=[copy.deepcopy(m) for m in modules],
            document_modules=[copy.deepcopy(m) for m in modules],
        )
        model = SentenceTransformer(modules=[router], device=device or "cpu",
                                    similarity_fn_name=base.similarity_fn_name or "cosine")
    model.max_seq_length = max_seq_length
    return model
