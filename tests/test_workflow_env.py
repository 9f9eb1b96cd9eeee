"""The host jobs' software declaration (workflow/envs/loaderbench.yaml, Snakemake's --use-conda) installs this
checkout. Conda itself is not on these machines: the environment is not built here, only its wiring checked."""

import yaml
from conftest import REPO


def test_the_host_environment_installs_this_checkout_with_a_supported_python():
    env_file = REPO / "workflow/envs/loaderbench.yaml"
    env = yaml.safe_load(env_file.read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    editable = [p.split(None, 1)[1] for p in pip if p.startswith("-e ")]
    assert len(editable) == 1
    # conda runs pip from the environment file's folder: the path must lead to this project
    assert (env_file.parent / editable[0]).resolve() == REPO
    assert (REPO / "pyproject.toml").is_file()
    assert any(str(d).startswith("python>=3.11") for d in env["dependencies"])
