"""Names shared by the CRD, the builders and the controller (one place, so they cannot drift)."""

GROUP = "ragengine.io"
VERSION = "v1beta1"  # the hub and storage version; v1alpha1 is still served (conversion/)
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "RAGEngine"
PLURAL = "ragengines"
SINGULAR = "ragengine"
SHORT_NAMES = ["rag"]
CRD_NAME = f"{PLURAL}.{GROUP}"

FIELD_MANAGER = "ragengine-operator"
FINALIZER = f"operator.{GROUP}/finalizer"
# kopf's own bookkeeping lives in annotations under our group, so status stays strictly typed.
KOPF_ANNOTATION_PREFIX = f"operator.{GROUP}"

# Labels: the recommended app.kubernetes.io set, plus two stable selector labels of our own.
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PART_OF = "app.kubernetes.io/part-of"
SELECTOR_NAME = f"{GROUP}/ragengine"
SELECTOR_COMPONENT = f"{GROUP}/component"
CONFIG_HASH_ANNOTATION = f"{GROUP}/config-hash"
# A sync asked for now (as Flux's reconcile.fluxcd.io/requestedAt): any new value of ragengine.io/sync-now syncs
# every source; sync.ragengine.io/<source> one source (the push receiver writes it, receiver/server.py).
SYNC_NOW_ANNOTATION = f"{GROUP}/sync-now"
SOURCE_SYNC_ANNOTATION_PREFIX = f"sync.{GROUP}/"

COMPONENT_ENGINE = "engine"
COMPONENT_INFERENCE = "inference"
COMPONENT_SYNC = "source-sync"  # the pods of source syncs (Jobs in job mode)
COMPONENT_BACKUP = "backup"  # the pods of spec.backup's CronJob

# Condition types (positive polarity, per the API conventions) and the status values.
READY = "Ready"
INFERENCE_READY = "InferenceReady"
ENGINE_READY = "EngineReady"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
# True while the engine requires its API key and its NetworkPolicy is on; never feeds Ready.
SECURE_DEFAULTS = "SecureDefaults"
# True while an index is re-indexed to the spec's embedding model (or the engine has not picked it up yet);
# never feeds Ready: the old versions serve meanwhile (docs/versions.md).
REINDEXING = "Reindexing"
# Only with spec.guardrails.enabled: whether the policy ConfigMap parses (reconcile/guardrails.py).
GUARDRAILS_POLICY = "GuardrailsPolicy"
CONDITION_TYPES = (READY, INFERENCE_READY, ENGINE_READY, PROGRESSING, DEGRADED, SECURE_DEFAULTS)

# Container-side facts of the two workloads.
ENGINE_PORT = 8000
ENGINE_SERVICE_PORT = 80
ENGINE_DATA_DIR = "/data"
ENGINE_MODEL_CACHE_DIR = "/data/models"
# spec.embedding reaches the engine as a file of a ConfigMap volume, which the kubelet updates in place:
# a new model is re-indexed to without restarting the pods (docs/versions.md).
ENGINE_EMBEDDING_DIR = "/etc/ragengine/embedding"
ENGINE_EMBEDDING_FILE = "embedding.json"
# spec.evaluation the same way: the engine's evaluation file, and the golden set's ConfigMap key (docs/evaluation.md).
ENGINE_EVALUATION_DIR = "/etc/ragengine/evaluation"
ENGINE_EVALUATION_FILE = "evaluation.json"
ENGINE_GOLDEN_DIR = "/etc/ragengine/golden"
ENGINE_GOLDEN_FILE = "golden.jsonl"
VLLM_PORT = 8000
VLLM_CACHE_DIR = "/models"  # HF_HOME: the model-cache volume (weights at its root, as before)
VLLM_SCRATCH_DIR = "/cache"  # XDG/vLLM/torch compile caches: an emptyDir (restricted pods run as non-root)
VLLM_UID = 1000
VLLM_SHM_LIMIT = "8Gi"
GPU_RESOURCE = "nvidia.com/gpu"
# The vLLM release the operator renders its flags for (operator/ragengine_operator/vllm_flags.json is
# extracted from this release's own parser by hack/vllm_flags.py).
VLLM_VERSION = "0.33.0"
DEFAULT_VLLM_IMAGE = f"vllm/vllm-openai:v{VLLM_VERSION}"
