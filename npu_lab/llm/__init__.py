"""Host-side LLM-serving arithmetic (issues 18 §3-4, 19 §4): published model configurations, the
KV-cache memory calculator, the article's KV figures checked, its section-3 claims table and the
8x910B decode-step roofline. Nothing here needs a kernel or the simulator."""

from .article_kv import article_kv_check, article_kv_summary
from .case_study import (STORAGE_FORMATS, case_study_assumptions, case_study_check, case_study_point,
                         decode_step_roofline, service_curve)
from .claims import SECTION3_CLAIMS_CSV, section3_claims, write_section3_claims
from .kv_memory import (DTYPE_BYTES, dtype_bytes, kv_bytes_per_token_per_layer, kv_cache_bytes, kv_memory_table,
                        weights_bytes)
from .model_configs import MODEL_CONFIGS, ModelConfig, get_model_config

__all__ = ["MODEL_CONFIGS", "ModelConfig", "get_model_config", "DTYPE_BYTES", "dtype_bytes",
           "kv_bytes_per_token_per_layer", "kv_cache_bytes", "kv_memory_table", "weights_bytes",
           "article_kv_check", "article_kv_summary", "section3_claims", "write_section3_claims",
           "SECTION3_CLAIMS_CSV", "decode_step_roofline", "case_study_check", "case_study_assumptions",
           "case_study_point", "service_curve", "STORAGE_FORMATS"]
