#!/usr/bin/env python3
"""Writes a deterministic source-like tree of many small files.

    bench/many-files-tree.py DIR [--files N] [--seed S]

N files (default 200 000) in folders of 5 to 35 files each, nested up to five deep (about
N / 20 folders), with sizes spread as in a source tree: most files between 200 bytes and 8 KiB,
one in fifty up to 256 KiB, one in a thousand empty. Content is text made of words, so that it
compresses about as source code does, and no two files are alike (a per-file header). The same
arguments always give the same tree, byte for byte; modes and times are fixed too.
"""
import argparse
import os
import random

WORDS = (
    "fn let mut pub struct impl return match self use crate mod where async await const static "
    "type enum trait for while loop if else Some None Ok Err Result Option Vec String Box Arc "
    "error context value index buffer length offset reader writer config status request answer "
    "the of to and a in is it that for on with as was at by this be from or have an are"
).split()


def file_size(rng):
    roll = rng.random()
    if roll < 0.001:
        return 0
    if roll < 0.02:
        return rng.randint(8 * 1024, 256 * 1024)
    # Log-uniform between 200 bytes and 8 KiB: many small files, fewer larger ones.
    return int(200 * (8 * 1024 / 200) ** rng.random())


def text(rng, size, header):
    out = [header]
    length = len(header)
    while length < size:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) + "\n"
        out.append(line)
        length += len(line)
    return "".join(out).encode()[:size]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--files", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=20261201)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    os.makedirs(args.dir, exist_ok=True)
    written = folders = 0
    stack = [args.dir]
    while written < args.files:
        parent = stack[-1]
        folder = os.path.join(parent, "d%05d" % folders)
        folders += 1
        os.mkdir(folder)
        for number in range(min(rng.randint(5, 35), args.files - written)):
            name = os.path.join(folder, "f%03d.%s" % (number, rng.choice(["rs", "py", "c", "md", "txt"])))
            size = file_size(rng)
            with open(name, "wb") as out:
                out.write(text(rng, size, "// %s\n" % name[len(args.dir):]))
            os.utime(name, (1_700_000_000 + written, 1_700_000_000 + written))
            written += 1
        # Down one level two times in five (at most five deep), else up or stay.
        roll = rng.random()
        if roll < 0.4 and len(stack) < 6:
            stack.append(folder)
        elif roll < 0.7 and len(stack) > 1:
            stack.pop()
    print("%d files in %d folders below %s" % (written, folders, args.dir))


if __name__ == "__main__":
    main()
