"""Benchmark protocols: image-text retrieval (COCO, Flickr30k) and composed image retrieval
(CIRR, CIRCO, FashionIQ, GeneCIS), each on the core's exact ranks.

Each protocol has a reader (official files -> typed records, with errors naming the query),
scorers (embeddings or a similarity matrix -> :class:`recallkit.Result`) and, where a benchmark
has a test server, an exporter of its submission file (written atomically).
"""

from recallkit.protocols.circo import (
    CIRCO_SEMANTIC_ASPECTS,
    CIRCOQuery,
    CIRCOSplit,
    circo_metrics,
    circo_metrics_from_predictions,
    circo_metrics_from_scores,
    circo_rankings,
    circo_rankings_from_scores,
    read_circo,
    read_coco_image_ids,
    write_circo_submission,
)
from recallkit.protocols.cirr import (
    CIRRQuery,
    CIRRSplit,
    cirr_rankings,
    cirr_rankings_from_scores,
    cirr_recall,
    cirr_recall_from_scores,
    read_cirr,
    write_cirr_submission,
)
from recallkit.protocols.fashioniq import (
    FASHIONIQ_CATEGORIES,
    FashionIQCategory,
    FashionIQQuery,
    fashioniq_recall,
    fashioniq_recall_from_scores,
    read_fashioniq,
)
from recallkit.protocols.genecis import (
    GENECIS_TASKS,
    GeneCISSample,
    GeneCISTask,
    genecis_recall,
    genecis_recall_from_embeddings,
    genecis_summary,
    read_genecis,
    read_genecis_tasks,
)
from recallkit.protocols.image_text import (
    KARPATHY_COUNTS,
    KarpathySplit,
    image_text_recall,
    image_text_recall_from_scores,
    read_karpathy_split,
)

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
