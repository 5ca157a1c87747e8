"""One sanitiser makes run ids, DAG ids and cluster ids artifact path segments; the caches are named by
settings, never found from the checkout; private files are created 0600 and never overwritten."""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import kafkaops
import spark_apps
from kafkaops.errors import SetupError
from kafkaops.platform import paths
from kafkaops.platform.paths import private_file, safe_name


@pytest.mark.parametrize("name, expected", [
    ("manual__2026-11-22T10:00:00+00:00", "manual__2026-11-22T10_00_00_00_00"),
    ("scheduled__2026-01-01T00:00:00.123456+00:00", "scheduled__2026-01-01T00_00_00.123456_00_00"),
    ("kafka_scale_out", "kafka_scale_out"),
    ("a b/../c", "a_b_.._c"),
    ("../../etc/passwd", ".._.._etc_passwd"),
    (42, "42"),
])
def test_safe_name(name: object, expected: str) -> None:
    assert safe_name(name) == expected


def test_safe_name_is_cut_at_the_limit() -> None:
    assert safe_name("x" * 500) == "x" * 200 and safe_name("abcdef", limit=3) == "abc"


def test_the_artifacts_of_a_run_go_under_its_safe_name() -> None:
    from kafkaops.platform.lifecycle import OperationContext

    ctx = OperationContext("kafka_scale_out", "manual__2026-11-22T10:00:00+00:00", {}, params=None)
    assert ctx.artifact_prefix == "kafka_scale_out/manual__2026-11-22T10_00_00_00_00"


# -- the caches: settings, not the checkout -------------------------------------------------------------------

PACKAGE = Path(kafkaops.__file__).resolve().parent
SPARK_APPS = Path(spark_apps.__file__).resolve().parent


def cache_paths(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """CACHE and JARS of a fresh interpreter with ``env`` (and nothing else of ours), run from ``tmp_path``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKAOPS_", "XDG_"))}
    script = "import json; from kafkaops.platform import paths; print(json.dumps([str(paths.CACHE), str(paths.JARS)]))"
    done = subprocess.run([sys.executable, "-c", script], env={**base, "HOME": str(tmp_path / "home"), **env},
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True)
    cache, jars = json.loads(done.stdout)
    return {"cache": cache, "jars": jars}


def test_the_cache_is_under_the_home_by_default_and_xdg_is_respected(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cache_paths({}, tmp_path) == {"cache": f"{home}/.cache/kafkaops", "jars": f"{home}/.cache/kafkaops/jars"}
    assert cache_paths({"XDG_CACHE_HOME": "/xdg"}, tmp_path) == {"cache": "/xdg/kafkaops", "jars": "/xdg/kafkaops/jars"}


def test_kafkaops_cache_and_kafkaops_jars_name_the_folders(tmp_path: Path) -> None:
    assert cache_paths({"KAFKAOPS_CACHE": "/srv/kc"}, tmp_path) == {"cache": "/srv/kc", "jars": "/srv/kc/jars"}
    assert cache_paths({"KAFKAOPS_CACHE": "/srv/kc", "KAFKAOPS_JARS": "/opt/jars"}, tmp_path) == \
        {"cache": "/srv/kc", "jars": "/opt/jars"}


def test_missing_jars_name_the_settings_and_make_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "JARS", tmp_path / "jars")
    (tmp_path / "jars" / "spark").mkdir(parents=True)
    with pytest.raises(SetupError) as caught:
        paths.jar_dir("spark")
    message = str(caught.value)
    assert message.startswith(f"no jars in {tmp_path}/jars/spark: set KAFKAOPS_JARS ")
    assert "KAFKAOPS_CACHE" in message and "'make setup'" in message
    (tmp_path / "jars" / "spark" / "a.jar").write_bytes(b"")
    assert paths.jar_dir("spark") == tmp_path / "jars" / "spark"


def test_no_module_of_the_wheel_finds_files_from_the_checkout() -> None:
    """What a module needs comes from settings (paths) or package data (kafkaops.resources): a path
    climbing out of the package (``Path(__file__).parents[n]``) would not exist in an installed wheel."""
    modules = [*PACKAGE.rglob("*.py"), *SPARK_APPS.glob("*.py")]
    assert len(modules) > 40
    climbing = [f"{m.relative_to(PACKAGE.parent)}:{n}" for m in modules if "/resources/dags/" not in str(m)
                for n, line in enumerate(m.read_text().splitlines(), 1) if re.search(r"\.parents\[|REPO_ROOT", line)]
    assert not climbing, f"paths resolved from the checkout at {climbing}; use kafkaops.resources or paths"


# -- private files: created 0600, never overwritten ------------------------------------------------------------

@pytest.fixture(params=[0o000, 0o002, 0o277], ids=oct)
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """The test runs under this umask (0o000: a permissive one; 0o277: one that would take the owner's
    write bit away); the old one is put back after it."""
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def test_a_private_file_is_0600_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "secret.properties"
    with private_file(path) as out:
        assert stat.S_IMODE(os.fstat(out.fileno()).st_mode) == 0o600  # before anything is written
        out.write(b"password=s3cret\n")
    assert out.closed and path.read_bytes() == b"password=s3cret\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_existing_file_is_refused_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "kafka.properties"
    path.write_text("kept\n")
    path.chmod(0o644)
    with pytest.raises(FileExistsError) as caught:
        with private_file(path) as out:
            out.write(b"replaced\n")
    assert str(path) in str(caught.value) and "never overwritten" in str(caught.value)
    assert path.read_text() == "kept\n" and stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_symlink_is_refused_and_its_target_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("kept\n")
    link = tmp_path / "kafka.properties"
    link.symlink_to(target)
    (tmp_path / "dangling.properties").symlink_to(tmp_path / "nowhere")
    for path in (link, tmp_path / "dangling.properties"):
        with pytest.raises(FileExistsError):
            with private_file(path):
                pass
    assert target.read_text() == "kept\n" and not (tmp_path / "nowhere").exists()


def test_a_private_file_is_closed_when_the_block_fails(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yml"
    with pytest.raises(RuntimeError):
        with private_file(path) as out:
            out.write(b"all:\n")
            raise RuntimeError("the caller failed half-way")
    assert out.closed and path.read_bytes() == b"all:\n"
