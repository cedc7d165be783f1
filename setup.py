"""Which packages the wheel carries, found on disk (pyproject.toml holds everything else).

Three folders are installed under import names other than their own: PyPI's `adapters` is
AdapterHub and `scenarios` is no package name to claim, so adapters/ becomes
`sentinel_adapters` and the YAML catalog scenarios/ becomes `sentinel_catalog`. Every folder
with an __init__.py below them is a subpackage: a new one needs no edit here.
"""

from pathlib import Path

from setuptools import find_packages, setup

ROOTS = {"sentinel": "sentinel", "sentinel_adapters": "adapters", "sentinel_catalog": "scenarios"}


def packages(root: Path = Path(__file__).resolve().parent) -> dict[str, str]:
    """{package name: folder} for each root and every package below it."""
    found = {}
    for name, folder in ROOTS.items():
        found[name] = folder
        for sub in find_packages(str(root / folder)):
            found[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"
    return found


if __name__ == "__main__":
    setup(packages=list(packages()), package_dir=ROOTS)
