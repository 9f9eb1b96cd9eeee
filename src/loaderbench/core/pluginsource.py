"""A plugin's code, found and identified without importing it: `find_module` (where an import would find it) and
`plugin_identity` (its distribution's version and a hash of its source). The cells' specs carry the identity, so an
edited plugin is measured again (docs/plugins.md). Nothing here imports torch or the plugin.
"""

from __future__ import annotations

import functools


def find_module(name: str):
    """The ModuleSpec an import of module `name` would use, found without running the module or the packages above it
    (a plugin's package may import torch, or start threads); None when it cannot be found.

    Each level is looked up on the finders an import uses (sys.meta_path: installed, editable and PYTHONPATH
    modules), in the package above's folders. Only where that fails below a package whose `__init__` may extend its
    folders as it runs (pkgutil's extend_path, pkg_resources' declare_namespace) is that package imported to look
    once more, as importlib.util.find_spec does."""
    chain = _spec_chain(name)
    return chain[-1] if chain else None


def _spec_chain(name: str) -> list | None:
    """The specs of `name` and of each package above it, outermost first; None when one cannot be found."""
    import importlib.util
    import sys

    chain, path = [], None
    parts = name.split(".")
    for end in range(1, len(parts) + 1):
        full = ".".join(parts[:end])
        module = sys.modules.get(full)
        spec = module.__spec__ if module is not None else _find_spec(full, path)
        if spec is None:
            break
        chain.append(spec)
        path = spec.submodule_search_locations
        if path is None and end < len(parts):
            return None  # a module, not a package: nothing lies below it
    else:
        return chain
    if not chain or not _may_extend_path(chain[-1]):
        return None
    try:
        spec = importlib.util.find_spec(name)
    except Exception:  # noqa: BLE001 - a package above that is missing or fails to import: not found
        return None
    if spec is None:
        return None
    above = [sys.modules[".".join(parts[:i])].__spec__ for i in range(1, len(parts))]
    return [*above, spec]


def _may_extend_path(spec) -> bool:
    """Whether package `spec`'s `__init__` may add folders to its `__path__` when it runs."""
    from pathlib import Path

    try:
        text = Path(spec.origin).read_text(errors="replace")
    except (OSError, TypeError):  # no source to read (a namespace package's folders are found anew anyway)
        return spec.origin is not None
    return "__path__" in text or "declare_namespace" in text


def _find_spec(full: str, path):
    import sys

    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is not None and (spec := find(full, path)) is not None:
            return spec
    return None


def plugin_source(reference: str) -> dict | None:
    """Where the code of plugin `reference` ('module:factory') lies and what it is, read without importing it; None
    when its module cannot be found. `identity` is the part that names the code wherever it is installed (no paths).

    What is hashed (`source_sha256`): every Python source file of the module's top-level regular package (for
    `mypkg.fast_io:build`, all of mypkg, so that a helper module beside it counts too), or the module's file when it
    is a module on its own (`fast_io.py` on PYTHONPATH: a module it imports from beside it does not count). Compiled
    extensions count through the distribution's version only."""
    chain = _spec_chain(reference.partition(":")[0])
    if chain is None:
        return None
    root, files = _source_files(chain)
    dist = _distribution(chain[0].name.split(".")[0], root)
    return {
        "module": chain[-1].name,
        "root": str(root) if root else None,
        "files": len(files),
        "editable": dist["editable"] if dist else None,
        "identity": {
            "distribution": dist["name"] if dist else None,
            "version": dist["version"] if dist else None,
            "source_sha256": _files_sha256(root, files) if files else None,
        },
    }


def plugin_identity(reference: str) -> dict | None:
    """What names the code of plugin `reference` in its cells' specs: its distribution and version, when an installed
    one ships it, and a hash of its source (`plugin_source`); None when its module cannot be found.

    Both, and the hash always: an editable install keeps its version while its source is edited, and a plugin
    reinstalled from its folder (`pip install .`) often keeps it too; a version bump alone, with the source the same,
    is a new release its user means to measure."""
    source = plugin_source(reference)
    return source["identity"] if source else None


def _source_files(chain: list):
    """(root, files): the folder of the outermost regular package of `chain` and its Python sources, or the module's
    file and itself; (None, []) for a module without a file (built-in, frozen)."""
    from importlib.machinery import SOURCE_SUFFIXES
    from pathlib import Path

    for spec in chain:
        if not spec.has_location or not spec.origin:
            continue  # a namespace package: its folders may hold many packages; look at the level below
        origin = Path(spec.origin)
        if not origin.is_file():  # in a zip archive: no file to read
            return None, []
        if spec.submodule_search_locations is None:
            return origin, [origin]
        root = origin.parent
        files = []
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root).parts
            if (
                path.suffix in SOURCE_SUFFIXES
                and path.is_file()
                and not any(p.startswith(".") or p == "__pycache__" for p in rel)
            ):
                files.append(path)
        return root, files
    return None, []


def _files_sha256(root, files: list) -> str:
    """SHA-256 over the files' paths (relative to `root`'s folder, so that the same code hashes the same wherever it
    is installed) and their bytes."""
    import hashlib

    base = root.parent
    h = hashlib.sha256()
    for path in files:
        h.update(f"{path.relative_to(base).as_posix()}\0{_file_sha256(path)}\0".encode())
    return h.hexdigest()


def _file_sha256(path) -> str:
    st = path.stat()
    return _content_sha256(str(path), st.st_mtime_ns, st.st_size, st.st_ino)


@functools.lru_cache(maxsize=4096)
def _content_sha256(path: str, mtime_ns: int, size: int, inode: int) -> str:
    """A file's SHA-256, kept while its mtime, size and inode stay: Snakemake asks for a cell's spec once per job."""
    import hashlib

    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _distribution(top: str, root) -> dict | None:
    """The installed distribution that ships top-level module `top` (found at `root`): by its files' top-level names,
    or an editable install whose project folder holds `root`; None for a module that is only on PYTHONPATH."""
    import sys
    from importlib import metadata

    names = _top_level_distributions(tuple(sys.path)).get(top, [])
    if not names and root is not None:
        real = root.resolve()
        names = [name for name, folder in _editable_folders(tuple(sys.path)).items() if folder in (real, *real.parents)]
    for name in dict.fromkeys(names):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        return {"name": dist.metadata["Name"], "version": dist.version, "editable": _editable_folder(dist) is not None}
    return None


# The installed distributions, read once for each sys.path (`path`): reading them all takes a fifth of a second, and
# Snakemake asks for a plugin cell's spec once per job. A version is read afresh each time (`_distribution`).
@functools.lru_cache(maxsize=4)
def _top_level_distributions(path: tuple) -> dict[str, list[str]]:
    from importlib import metadata

    return metadata.packages_distributions()


@functools.lru_cache(maxsize=4)
def _editable_folders(path: tuple) -> dict:
    from importlib import metadata

    out = {}
    for dist in metadata.distributions():
        if (folder := _editable_folder(dist)) is not None:
            out[dist.metadata["Name"]] = folder
    return out


def _editable_folder(dist):
    """The project folder of an editable install (PEP 610's direct_url.json), else None."""
    import json
    from pathlib import Path
    from urllib.parse import unquote, urlparse

    try:
        direct = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return None
    url = urlparse(direct.get("url", ""))
    if not direct.get("dir_info", {}).get("editable") or url.scheme != "file":
        return None
    return Path(unquote(url.path)).resolve()
