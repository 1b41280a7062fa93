"""The encoders every learned retriever starts from (EPR's dual encoder, TART-dual)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["build_bi_encoder", "freeze_document_encoder", "merge_with_base", "trained_at_length"]


def build_bi_encoder(base_model: str, *, shared_encoder: bool = True, max_seq_length: int | None = 256,
                     device: str | None = None) -> "SentenceTransformer":
    """The untrained dual encoder: a Router of two copies of ``base_model`` (query and document encoders),
    or the base itself when ``shared_encoder``; a registered name or a local folder. A base that is already a
    query/document Router (a trained dual encoder) is returned as it is, to train on."""
    import copy

    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Router

    from ..models import resolve_model
    from ..retrieval.pooling import adopt_instruction_pooling

    base = SentenceTransformer(str(resolve_model(base_model)), device=device or "cpu")
    already_dual = len(base) > 0 and isinstance(base[0], Router)
    if already_dual and not shared_encoder:
        # A trained dual encoder (a later mining round, or training continued): its two encoders go on as they are.
        model = base
    elif shared_encoder:
        # A base saved with its instruction left out of the pooling (an earlier TART run) keeps pooling that way.
        # Only here: a Router's copies keep the plain module, so a saved Router names no taskret class.
        model = adopt_instruction_pooling(base)
    else:
        modules = list(base.children())
        router = Router.for_query_document(
            query_modules=[copy.deepcopy(m) for m in modules],
            document_modules=[copy.deepcopy(m) for m in modules],
        )
        model = SentenceTransformer(modules=[router], device=device or "cpu",
                                    similarity_fn_name=base.similarity_fn_name or "cosine")
    if max_seq_length is not None:  # None keeps the base's own length
        model.max_seq_length = max_seq_length
    return model


def freeze_document_encoder(model: "SentenceTransformer") -> "SentenceTransformer":
    """Stop gradients into the ``document`` route of a query/document Router (:func:`build_bi_encoder` with
    ``shared_encoder=False``), in place: only the query encoder trains, so the documents' vectors stay the
    base's and an index built with the base serves the trained model as it is."""
    from sentence_transformers.sentence_transformer.modules import Router

    router = model[0] if len(model) else None
    if not isinstance(router, Router) or "document" not in router.sub_modules:
        raise ValueError("freezing the document encoder needs a query/document Router "
                         "(build_bi_encoder(..., shared_encoder=False))")
    for module in router.sub_modules["document"]:
        module.requires_grad_(False)
    return model


def trained_at_length(base_model: str, train_length: int, encode_length: int | None = None, *,
                      exclude_instruction: bool = False, freeze_documents: bool = False):
    """``(build, restore)`` for a shared encoder that trains at ``train_length`` tokens (speed) but is saved to
    encode at ``encode_length`` (default: the base's own length, read when ``build()`` runs), so long documents
    are not cut shorter at search time than the untrained base would cut them. ``restore(model)`` sets it back.

    ``exclude_instruction``: the model leaves each query's instruction out of its mean pooling
    (:mod:`taskret.retrieval.pooling`); ``restore`` saves that as the plain ``Pooling(include_prompt=False)``.
    ``freeze_documents``: a query/document Router of two copies of the base whose document copy does not train
    (:func:`freeze_document_encoder`; the trainer's ``router_mapping`` sends the query column to ``query``); it
    cannot take ``exclude_instruction`` (:func:`~taskret.retrieval.pooling.exclude_instruction_from_pooling`
    refuses a Router)."""
    from ..retrieval.pooling import exclude_instruction_from_pooling, standard_pooling

    lengths = {"encode": encode_length}

    def build() -> "SentenceTransformer":
        if freeze_documents:
            model = freeze_document_encoder(build_bi_encoder(base_model, shared_encoder=False, max_seq_length=None))
        else:
            model = build_bi_encoder(base_model, max_seq_length=None)
        lengths["encode"] = lengths["encode"] or model.max_seq_length
        model.max_seq_length = train_length
        return exclude_instruction_from_pooling(model) if exclude_instruction else model

    def restore(model: "SentenceTransformer") -> None:
        model.max_seq_length = lengths["encode"]
        standard_pooling(model)

    return build, restore


def merge_with_base(model: "SentenceTransformer", base_model: str, base_weight: float) -> None:
    """Move ``model``'s weights ``base_weight`` of the way back to ``base_model``'s, in place:
    ``(1 - w) * trained + w * base`` for every parameter the two share (WiSE-FT, Wortsman et al. 2022).
    A short fine-tune on a few tasks drifts away from what a base trained on a billion pairs knows about other
    domains; the average keeps most of the new skill and most of the old robustness."""
    import torch
    from sentence_transformers import SentenceTransformer

    from ..models import resolve_model

    if not 0.0 <= base_weight <= 1.0:
        raise ValueError(f"base_weight must be in [0, 1], got {base_weight}")
    if base_weight == 0.0:
        return
    base = SentenceTransformer(str(resolve_model(base_model)), device="cpu").state_dict()
    trained = model.state_dict()
    missing = [name for name in trained if name not in base or base[name].shape != trained[name].shape]
    if missing:
        raise ValueError(f"cannot merge with base model '{base_model}': {len(missing)} parameters differ "
                         f"(first: {missing[0]})")
    with torch.no_grad():
        for name, tensor in trained.items():
            if tensor.is_floating_point():
                tensor.mul_(1.0 - base_weight).add_(base[name].to(tensor.device, tensor.dtype), alpha=base_weight)
