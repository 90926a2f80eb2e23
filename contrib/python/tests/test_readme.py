"""The Python example of contrib/README.md runs as written: each ```python
block of its "## Python" section is fed line by line to an interactive
interpreter (code.InteractiveConsole, what pasting into a `python3` shell
does) against the real nodes of scripts/test-contrib.sh, with the README's
address replaced by theirs. A line must not raise, a block must not leave
the shell waiting for more input, and a line whose value the shell prints
must carry a comment that starts with that value, so the results the
README shows are the results a reader gets."""

import code
import io
import re
import sys
import tokenize
import traceback
import unittest

from ._paths import repo_file
from ._servers import members

README = repo_file("contrib", "README.md")
ADDRESS = '"127.0.0.1:7600"'


def python_blocks():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = re.search(r"^## Python\n(.*?)(?=^## )", text, re.S | re.M)
    if section is None:
        raise AssertionError(f'{README} has no "## Python" section')
    return re.findall(r"^```python\n(.*?)^```$", section.group(1), re.S | re.M)


def comments(source):
    """{line number (1-based): comment text after '#'}."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string[1:].strip()
    return out


class Shell(code.InteractiveConsole):
    """Records what a person at the prompt would see go wrong."""

    def __init__(self):
        super().__init__(filename="<README>")
        self.errors = []

    def showtraceback(self):
        self.errors.append("".join(traceback.format_exception(*sys.exc_info())))

    def showsyntaxerror(self, filename=None, **kwargs):
        self.errors.append("".join(traceback.format_exception_only(*sys.exc_info()[:2])))


class ReadmeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.members = ",".join(members())
        cls.blocks = python_blocks()

    def test_bytes_namespace_first_descriptor_second(self):
        self.assertGreaterEqual(len(self.blocks), 2, "a bytes namespace, then a descriptor, under ## Python")
        self.assertIn('dfkv.Client(' + ADDRESS + ', b"my-namespace")', self.blocks[0])
        self.assertNotIn("NamespaceDescriptor", self.blocks[0])
        self.assertIn("dfkv.NamespaceDescriptor(", self.blocks[1])

    def test_blocks_paste_line_by_line(self):
        for i, block in enumerate(self.blocks):
            with self.subTest(block=i):
                self.assertIn(ADDRESS, block, "the test points the README's address at its own nodes")
                self.run_block(block.replace(ADDRESS, repr(self.members)))

    def run_block(self, source):
        shell = Shell()
        notes = comments(source)
        shown = []
        hook = sys.displayhook
        sys.displayhook = lambda v: v is not None and shown.append(repr(v))
        try:
            more = False
            for n, line in enumerate(source.splitlines(), 1):
                shown.clear()
                more = shell.push(line)
                if shell.errors:
                    self.fail(f"line {n} of the block fails: {line}\n{''.join(shell.errors)}")
                for value in shown:
                    self.assertTrue(notes.get(n, "").startswith(value),
                                    f"line {n} prints {value}, its comment says {notes.get(n)!r}: {line}")
            self.assertFalse(more, "the block leaves the shell waiting for more input")
        finally:
            sys.displayhook = hook
            c = shell.locals.get("c")
            if c is not None:
                c.close()


if __name__ == "__main__":
    unittest.main()
