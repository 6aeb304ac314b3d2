"""st_header.py OUT HEADER [DATA_BYTES]: a safetensors file whose header is
HEADER exactly as given, Python escapes (\\xff, \\x01) decoded to bytes, with
its 8-byte length in front and DATA_BYTES (default 8) zero bytes of data
after: for the st-header- cases, headers no writer would make."""
import struct
import sys


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    header = sys.argv[2].encode("latin-1").decode("unicode_escape").encode("latin-1")
    data = b"\0" * (int(sys.argv[3]) if len(sys.argv) == 4 else 8)
    with open(sys.argv[1], "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + data)


if __name__ == "__main__":
    main()
