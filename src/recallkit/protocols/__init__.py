"""Benchmark protocols: image-text retrieval (COCO, Flickr30k) and composed image retrieval
(CIRR, CIRCO, FashionIQ, GeneCIS), each on the core's exact ranks.

Each protocol has a reader (official files -> typed records, with errors naming the query),
scorers (embeddings or a similarity matrix -> :class:`recallkit.Result`) and, where a benchmark
has a test server, an exporter of its submission file (written atomically).
"""

from __future__ import annotations

from recallkit._loading import exports as _exports

# Public name -> the module that defines it; loaded on first use (PEP 562).
_HOMES = {
    "CIRCOQuery": "recallkit.protocols.circo",
    "CIRCOSplit": "recallkit.protocols.circo",
    "CIRCO_SEMANTIC_ASPECTS": "recallkit.protocols.circo",
    "CIRRQuery": "recallkit.protocols.cirr",
    "CIRRSplit": "recallkit.protocols.cirr",
    "FASHIONIQ_CATEGORIES": "recallkit.protocols.fashioniq",
    "FashionIQCategory": "recallkit.protocols.fashioniq",
    "FashionIQQuery": "recallkit.protocols.fashioniq",
    "GENECIS_TASKS": "recallkit.protocols.genecis",
    "GeneCISSample": "recallkit.protocols.genecis",
    "GeneCISTask": "recallkit.protocols.genecis",
    "KARPATHY_COUNTS": "recallkit.protocols.image_text",
    "KarpathySplit": "recallkit.protocols.image_text",
    "circo_metrics": "recallkit.protocols.circo",
    "circo_metrics_from_predictions": "recallkit.protocols.circo",
    "circo_metrics_from_scores": "recallkit.protocols.circo",
    "circo_rankings": "recallkit.protocols.circo",
    "circo_rankings_from_scores": "recallkit.protocols.circo",
    "cirr_rankings": "recallkit.protocols.cirr",
    "cirr_rankings_from_scores": "recallkit.protocols.cirr",
    "cirr_recall": "recallkit.protocols.cirr",
    "cirr_recall_from_scores": "recallkit.protocols.cirr",
    "fashioniq_recall": "recallkit.protocols.fashioniq",
    "fashioniq_recall_from_scores": "recallkit.protocols.fashioniq",
    "genecis_recall": "recallkit.protocols.genecis",
    "genecis_recall_from_embeddings": "recallkit.protocols.genecis",
    "genecis_summary": "recallkit.protocols.genecis",
    "image_text_recall": "recallkit.protocols.image_text",
    "image_text_recall_from_scores": "recallkit.protocols.image_text",
    "read_circo": "recallkit.protocols.circo",
    "read_cirr": "recallkit.protocols.cirr",
    "read_coco_image_ids": "recallkit.protocols.circo",
    "read_fashioniq": "recallkit.protocols.fashioniq",
    "read_genecis": "recallkit.protocols.genecis",
    "read_genecis_tasks": "recallkit.protocols.genecis",
    "read_karpathy_split": "recallkit.protocols.image_text",
    "write_circo_submission": "recallkit.protocols.circo",
    "write_cirr_submission": "recallkit.protocols.cirr",
}

__all__ = [
    "CIRCO_SEMANTIC_ASPECTS",
    "FASHIONIQ_CATEGORIES",
    "GENECIS_TASKS",
    "KARPATHY_COUNTS",
    "CIRCOQuery",
    "CIRCOSplit",
    "CIRRQuery",
    "CIRRSplit",
    "FashionIQCategory",
    "FashionIQQuery",
    "GeneCISSample",
    "GeneCISTask",
    "KarpathySplit",
    "circo_metrics",
    "circo_metrics_from_predictions",
    "circo_metrics_from_scores",
    "circo_rankings",
    "circo_rankings_from_scores",
    "cirr_rankings",
    "cirr_rankings_from_scores",
    "cirr_recall",
    "cirr_recall_from_scores",
    "fashioniq_recall",
    "fashioniq_recall_from_scores",
    "genecis_recall",
    "genecis_recall_from_embeddings",
    "genecis_summary",
    "image_text_recall",
    "image_text_recall_from_scores",
    "read_circo",
    "read_cirr",
    "read_coco_image_ids",
    "read_fashioniq",
    "read_genecis",
    "read_genecis_tasks",
    "read_karpathy_split",
    "write_circo_submission",
    "write_cirr_submission",
]

__getattr__, __dir__ = _exports(__name__, globals(), _HOMES)
