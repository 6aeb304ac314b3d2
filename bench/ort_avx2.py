#!/usr/bin/env python3
"""ort_avx2.py NODE_MODULES DIR: ONNX Runtime as it runs on a processor without AVX-512.

ONNX Runtime chooses its kernels (MLAS's GEMMs, its softmax, its
attention) from the processor once, at load, and has no switch to choose
narrower ones.  Besides the processor's feature bits, every such choice
asks the operating system which register state it saves, with the
instruction xgetbv (XCR0): AVX-512 kernels need bits 5 to 7 (the opmask and
the upper zmm registers), AVX2 ones bits 1 and 2 (SSE and the ymm
registers).  On a processor without AVX-512, XCR0 is 7 (x87, SSE, AVX).

This writes DIR/libonnxruntime.so.1, a copy of onnxruntime-node's library
in which each xgetbv reads 7: the 3-byte instruction becomes
`lea 0x7(%rcx),%eax`, which is 7 where xgetbv reads XCR0 (ecx = 0 is what
selects XCR0; any site that is not plainly so is refused).  So every
dispatch in the library takes the branch an AVX2 processor takes, and with
LD_LIBRARY_PATH=DIR, node's binding loads the copy (LD_LIBRARY_PATH comes
before the binding's RUNPATH).  The copy lives in DIR only; nothing of ONNX
Runtime is kept or committed.  The sites are found by disassembling the
library (objdump, binutils); the patch is refused, nothing written, unless
each site is an xgetbv at a known file offset with ecx zeroed just before.

Prints the number of sites patched.  As a module: patch(node_modules, dir).
"""
import os
import re
import struct
import subprocess
import sys

LIB = os.path.join("onnxruntime-node", "bin", "napi-v6", "linux", "x64", "libonnxruntime.so.1")
XGETBV = bytes.fromhex("0f01d0")
LEA_7 = bytes.fromhex("8d4107")  # lea 0x7(%rcx),%eax
# what zeroes ecx in the instructions just before a site: xor %ecx,%ecx, or
# mov from a register the same instructions zeroed (xor %r9d,%r9d; mov %r9d,%ecx)
ZERO_ECX = re.compile(r"xor\s+%ecx,%ecx|mov\s+%(r\d+d|e[a-d]x|e[sd]i),%ecx")


def loads(image):
    """the ELF64 image's PT_LOAD segments: (vaddr, offset, file size)"""
    if image[:4] != b"\x7fELF" or image[4] != 2 or image[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    phoff, = struct.unpack_from("<Q", image, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", image, 0x36)
    segs = []
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
            "<IIQQQQ", image, phoff + i * phentsize)
        if p_type == 1:
            segs.append((p_vaddr, p_offset, p_filesz))
    return segs


def file_offset(segs, vaddr):
    for v, off, size in segs:
        if v <= vaddr < v + size:
            return off + vaddr - v
    raise ValueError("address %#x is in no loaded segment" % vaddr)


def sites(lib):
    """(address, the instructions before it) of each xgetbv objdump finds"""
    dump = subprocess.run(["objdump", "-d", "--no-show-raw-insn", lib], capture_output=True,
                          text=True, check=True).stdout.splitlines()
    found = []
    for i, line in enumerate(dump):
        m = re.match(r"\s*([0-9a-f]+):\s+xgetbv\s*$", line)
        if m:
            found.append((int(m.group(1), 16), dump[max(0, i - 12):i]))
    return found


def patch(node_modules, out_dir):
    lib = os.path.join(node_modules, LIB)
    with open(lib, "rb") as f:
        image = bytearray(f.read())
    segs = loads(image)
    found = sites(lib)
    if not found:
        raise ValueError("%s: no xgetbv found (a different build?)" % lib)
    for addr, before in found:
        off = file_offset(segs, addr)
        if image[off:off + 3] != XGETBV:
            raise ValueError("%#x: not the bytes of xgetbv" % addr)
        zeroing = [b for b in before if ZERO_ECX.search(b)]
        if not zeroing:
            raise ValueError("%#x: no zeroed ecx just before xgetbv: refused" % addr)
        if "xor" not in zeroing[-1]:
            # mov %rNd,%ecx: that register zeroed just before too
            reg = re.search(r"mov\s+%(\w+),%ecx", zeroing[-1]).group(1)
            if not any(re.search(r"xor\s+%%%s,%%%s" % (reg, reg), b) for b in before):
                raise ValueError("%#x: ecx from %%%s, not shown zero: refused" % (addr, reg))
        image[off:off + 3] = LEA_7
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "libonnxruntime.so.1"), "wb") as f:
        f.write(image)
    return len(found)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: ort_avx2.py NODE_MODULES DIR")
    try:
        print(patch(sys.argv[1], sys.argv[2]))
    except (OSError, ValueError, subprocess.CalledProcessError) as e:
        sys.exit("ort_avx2.py: %s" % e)


if __name__ == "__main__":
    main()
