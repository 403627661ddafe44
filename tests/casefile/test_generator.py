"""scripts/make_cases.py writes exactly the bundled case files it names: a hand edit of one of them
is either made in the generator too or shows here as the file that differs.

Usage: test_generator.py SOURCE_DIR
"""
import filecmp
import pathlib
import subprocess
import sys
import tempfile
import unittest

SOURCE = pathlib.Path(sys.argv[1])


class GeneratorTest(unittest.TestCase):
    def test_every_generated_file_is_the_bundled_one(self):
        with tempfile.TemporaryDirectory() as work:
            subprocess.run([sys.executable, str(SOURCE / "scripts" / "make_cases.py")], cwd=work, check=True)
            generated = sorted(p.relative_to(work) for p in pathlib.Path(work).rglob("*.json"))
            self.assertGreater(len(generated), 20)
            differing = [str(p) for p in generated
                         if not (SOURCE / p).is_file() or not filecmp.cmp(SOURCE / p, pathlib.Path(work) / p, shallow=False)]
            self.assertEqual(differing, [], "run scripts/make_cases.py from the repository root, or make the edit there")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
