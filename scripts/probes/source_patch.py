"""Text patches for the probe scripts, which patch a copy of the tree: every snippet replaced must
occur exactly once, so a probe that no longer fits the source stops instead of half-applying."""


class SourcePatch:
    def __init__(self, path):
        self.path = path
        with open(path) as f:
            self.text = f.read()

    def replace(self, old, new):
        count = self.text.count(old)
        if count != 1:
            raise SystemExit(f"{self.path}: a probe's snippet occurs {count} times, not once:\n{old}")
        self.text = self.text.replace(old, new)

    def save(self):
        with open(self.path, "w") as f:
            f.write(self.text)
