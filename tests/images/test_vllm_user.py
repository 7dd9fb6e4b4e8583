"""vLLM's pod runs as uid 1000, which has no passwd entry in the vllm/vllm-openai image (issue 23).

torch.compile reaches ``getpass.getuser()`` (torch 2.8's inductor cache directory called it unguarded),
which raises ``KeyError: getpwuid(): uid not found`` for such a user: vLLM crash-looped. The GPU image
cannot run here, so the environment the operator renders for vLLM is run, with its exact user, read-only
root and emptyDir, in a container that has torch and no passwd entry for uid 1000: the engine image's
export stage (`localhost/ragengine-torch:dev`, built by `make images`). podman adds a passwd entry for the
user by default; the kubelet does not, so it is turned off (``--passwd=false``).
"""

from __future__ import annotations

import json
import subprocess
import uuid

from ragengine_operator.manifests.inference import inference_deployment
from ragengine_operator.manifests.labels import Owner
from ragengine_operator.spec import RAGEngineSpec
from tests.support import podman

IMAGE = "localhost/ragengine-torch:dev"
PYTHON = "/opt/export/bin/python"
PROBE = """
import getpass, json, os
out = {}
try:
    out["user"] = getpass.getuser()
except KeyError as exc:
    out["user_error"] = str(exc)
from torch._inductor.runtime.cache_dir_utils import cache_dir
out["inductor_cache"] = cache_dir()
open(os.path.join(out["inductor_cache"], "probe"), "w").write("written")
out["home"] = os.path.expanduser("~")
print(json.dumps(out))
"""


def _vllm_pod() -> dict:
    spec = RAGEngineSpec.model_validate({"inference": {"model": "Qwen/Qwen2.5-0.5B-Instruct"}})
    return inference_deployment(Owner("ns", "rag", str(uuid.uuid4())), spec)["spec"]["template"]["spec"]


def _probe(pod: dict) -> dict:
    args = podman.run_args(pod, "vllm", name=f"vllm-user-{uuid.uuid4().hex[:8]}", ports={}, image=IMAGE,
                           command=[PYTHON, "-c", PROBE], detach=False,
                           secrets={("rag-inference-api-key", "api-key"): "generated-by-the-operator"},
                           mounts=podman.Mounts({c["persistentVolumeClaim"]["claimName"]: podman.scratch_dir()
                                                 for c in pod["volumes"] if "persistentVolumeClaim" in c}))
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_rendered_vllm_environment_works_for_a_uid_without_a_passwd_entry():
    podman.require_image(IMAGE)
    pod = _vllm_pod()
    container = next(c for c in pod["containers"] if c["name"] == "vllm")
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    out = _probe(pod)
    assert out.get("user") == env["USER"], out
    assert out["inductor_cache"] == env["TORCHINDUCTOR_CACHE_DIR"]  # on the writable emptyDir, not /tmp
    assert out["home"] == env["HOME"]


def test_without_user_and_logname_getuser_fails_as_it_did():
    """The control: the same container and environment less USER/LOGNAME is the crash of issue 23."""
    podman.require_image(IMAGE)
    pod = _vllm_pod()
    container = next(c for c in pod["containers"] if c["name"] == "vllm")
    container["env"] = [e for e in container["env"] if e["name"] not in ("USER", "LOGNAME")]
    out = _probe(pod)
    assert out.get("user_error") == "'getpwuid(): uid not found: 1000'", out
