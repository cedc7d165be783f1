"""A target's declared libraries (`TargetInfo.preload`, sentinel/targets.py) are imported once
by the zygote and inherited by every worker it forks (3-4 s of a Hugging Face trainer's 3-4 s
load, before). Two rules keep that invisible to the trainer:
- each name is one the adapter's own load imports anyway: the zygote holds nothing a worker
  would not (checked per target in a fresh interpreter, with its installed package);
- torch._dynamo imported by the zygote, before the worker's choice (eager unless --compile, by
  TORCHDYNAMO_DISABLE, which torch reads when torch.compile is called): a worker still runs a
  compiled function eagerly."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from sentinel import targets

LOADED = """
import io, json, sys
from sentinel import worker
w = worker.Worker({"target": sys.argv[1], "root": None, "device": "cpu", "timeout": 60,
                   "options": {"plant": None, "compile": False}}, io.BytesIO(), b"k" * 16)
w.load()
print(json.dumps({n: n in sys.modules for n in sys.argv[2:]}))
"""


@pytest.mark.parametrize("name", [t.name for t in targets.BUILTIN if t.preload and t.package])
def test_every_preloaded_library_is_one_the_adapters_load_imports(name):
    info = targets.get(name)
    if importlib.util.find_spec(info.package) is None:
        pytest.skip(f"{info.package} is not installed ({info.install})")
    out = subprocess.run([sys.executable, "-c", LOADED, name, *info.preload], capture_output=True, text=True,
                         timeout=300, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert all(seen.values()), f"declared but never imported by {name}'s load: {[n for n, v in seen.items() if not v]}"


DYNAMO = """
import io, sys
import torch._dynamo  # as the zygote's preload does, before the worker decides
from sentinel import worker
w = worker.Worker({"target": "reference", "root": None, "device": "cpu", "timeout": 60,
                   "options": {"plant": None, "compile": sys.argv[1] == "compile"}}, io.BytesIO(), b"k" * 16)
w.load()
f = lambda x: x + 1
print(torch.compile(f) is f)  # eager: torch.compile hands back the function itself
"""


@pytest.mark.parametrize("mode, eager", [("eager", "True"), ("compile", "False")])
def test_a_worker_is_eager_unless_compile_though_the_zygote_imported_dynamo(mode, eager):
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHDYNAMO_DISABLE", "TORCH_COMPILE_DISABLE")}
    out = subprocess.run([sys.executable, "-c", DYNAMO, mode], capture_output=True, text=True, timeout=300,
                         check=True, env=env)
    assert out.stdout.split()[-1] == eager
