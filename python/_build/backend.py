"""backend.py: the package's build, a PEP 517 backend in the tree.

'pip install ./python' needs nothing from the network: pip runs this file
(pyproject.toml's backend-path) with no build requirements, and it writes
a pure-Python wheel of python/mha/ by hand, with two facts of the tree
beside it in mha/_where.py: the version (lib/mha.h's MHA_VERSION_STRING,
the command's own) and the path of the mha program built there (../mha),
which the package runs unless $MHA_EXECUTABLE says otherwise.
"""
import base64
import hashlib
import os
import re
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
TOP = os.path.dirname(HERE)


def _version():
    try:
        with open(os.path.join(TOP, "lib", "mha.h"), encoding="utf-8") as f:
            return re.search(r'#define MHA_VERSION_STRING "([0-9.]+)"', f.read()).group(1)
    except (OSError, AttributeError):
        raise RuntimeError("python/ builds inside mha's source tree: lib/mha.h gives its version")


def _files(version):
    """(name in the wheel, bytes) of the package"""
    out = []
    src = os.path.join(HERE, "mha")
    for name in sorted(os.listdir(src)):
        if name.endswith(".py") and name != "_where.py":
            with open(os.path.join(src, name), "rb") as f:
                out.append(("mha/" + name, f.read()))
    exe = os.path.join(TOP, "mha")
    # the tree's engine, which the package loads in process (_lib.py), beside lib/libmha.so
    lib = os.path.join(TOP, "engine", "libmhe.so")
    where = '"""_where.py: written by python/_build/backend.py when the wheel was built."""\n' \
            "VERSION = %r\nEXECUTABLE = %r\nLIBRARY = %r\n" % (
                version, exe if os.access(exe, os.X_OK) else None,
                lib if os.path.exists(lib) else None)
    out.append(("mha/_where.py", where.encode()))
    return out


def _metadata(version):
    return ("Metadata-Version: 2.1\nName: mha\nVersion: %s\n"
            "Summary: multi-head attention computed exactly in float64, every step visible\n"
            "Requires-Python: >=3.9\nRequires-Dist: numpy\n" % version).encode()


def _dist_info(version):
    d = "mha-%s.dist-info/" % version
    return [(d + "METADATA", _metadata(version)),
            (d + "WHEEL", b"Wheel-Version: 1.0\nGenerator: mha python/_build/backend.py\n"
                          b"Root-Is-Purelib: true\nTag: py3-none-any\n")]


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    version = _version()
    for name, data in _dist_info(version):
        path = os.path.join(metadata_directory, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return "mha-%s.dist-info" % version


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    name = "mha-%s-py3-none-any.whl" % version
    entries = _files(version) + _dist_info(version)
    record = "mha-%s.dist-info/RECORD" % version
    lines = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in entries:
            z.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            lines.append("%s,sha256=%s,%d" % (arc, digest, len(data)))
        lines.append(record + ",,")
        z.writestr(record, "\n".join(lines) + "\n")
    return name
