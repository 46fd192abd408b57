"""scripts/gpu_check.sh's smoke test on CPU: every part runs — carried wheels installed offline (a torch wheel
refused), the GPU tests skipped, the throughput bench on the debug model with the plain PyTorch reference, the
doctor — into one log that starts with the date and the exact command."""

import base64
import hashlib
import os
import re
import subprocess
import sys
import zipfile

import pytest


def make_wheel(directory, name: str, module_text: str) -> None:
    """A minimal pure-Python wheel, as pip builds them (metadata, WHEEL tag, RECORD with hashes)."""
    dist = f"{name}-0.1.0.dist-info"
    files = {f"{name}.py": module_text,
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()}"
              f",{len(text.encode())}" for path, text in files.items()]
    files[f"{dist}/RECORD"] = "\n".join(record + [f"{dist}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(directory / f"{name}-0.1.0-py3-none-any.whl", "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)


@pytest.mark.slow
def test_gpu_check_runs_every_part_on_cpu_into_one_log(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_wheel(wheels, "carried_probe", "VALUE = 1\n")
    (wheels / "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl").write_bytes(b"not installed")
    log = tmp_path / "check.log"
    cmd = ["bash", "scripts/gpu_check.sh", "--wheels", str(wheels), "--log", str(log), "--device", "cpu",
           "--model", "debug", "--seq-len", "32", "--steps", "1", "--warmup", "1", "--compile", "off"]
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "2"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)
    text = log.read_text()
    assert proc.returncode == 0, text[-6000:]
    assert re.match(r"bessemer GPU check, \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\ncommand: scripts/gpu_check.sh --wheels ",
                    text)
    assert "refused torch-2.11.0-cp312" in text and "Successfully installed carried-probe" in text
    assert all(f"== {part}: PASS" in text for part in ("wheels", "preflight", "tests", "bench", "doctor"))
    assert "skipped" in text and "failed" not in text.split("== tests", 1)[1].split("== tests:", 1)[0]
    assert re.search(r"^bessemer +debug +bf16 eager .* tokens/s", text, re.MULTILINE)
    assert re.search(r"^ratio gpu_tokens_vs_torchtitan \d", text, re.MULTILINE) and "reference: plain PyTorch" in text
    assert text.rstrip().endswith("GPU check passed") and proc.stdout == text  # the log is what was printed
