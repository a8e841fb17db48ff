"""``jaxfeed.pipeline.elastic``: elastic resume (states saved by W workers, resumed by W' workers). The code
lives in ``pipeline/checkpoint/elastic.py``; this module is its public name."""

from .checkpoint.elastic import (GLOBAL_STATE_KIND, GLOBAL_STATE_VERSION, check_supported, merge_states,
                                 remaining_positions, worker_dataset, worker_iterator)
from .nodes.elastic_select import ElasticSelect

__all__ = ["ElasticSelect", "check_supported", "worker_dataset", "worker_iterator", "merge_states",
           "remaining_positions", "GLOBAL_STATE_KIND", "GLOBAL_STATE_VERSION"]
