"""Reading printed numbers back from pages, for the tests of issue 42's "numbers as they are"
(tests/report/test_printed_numbers.py, tests/console/test_compare_page.py)."""

from __future__ import annotations

from html.parser import HTMLParser


class _Text(HTMLParser):
    """The visible text of an HTML page as lines, the way a reader sees it: a table row, a
    paragraph or a list item per line, cells two spaces apart; script and style left out."""

    BLOCKS = {"tr", "p", "li", "h1", "h2", "h3", "h4", "div", "br", "table", "pre", "title", "svg"}

    def __init__(self):
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        self._skip += tag in ("script", "style")
        if tag in self.BLOCKS:
            self.parts.append("\n")
        elif tag in ("td", "th"):
            self.parts.append("  ")

    def handle_endtag(self, tag):
        self._skip -= tag in ("script", "style")
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def visible_text(html: str) -> str:
    """What a reader of ``html`` sees, one line per row, paragraph or item (see :class:`_Text`)."""
    p = _Text()
    p.feed(html)
    p.close()
    return "\n".join(line.strip() for line in "".join(p.parts).splitlines() if line.strip())


def _decimals(s: str) -> int:
    return len(s.split(".")[1])


def assert_printed_as_it_is(printed: str, value: float) -> None:
    """A printed signed number has its value's sign (an exact zero prints "+") and equals it to
    the decimals it shows."""
    x = float(printed)
    if value < 0:
        assert printed.startswith("-"), f"{value} printed {printed}"
    elif value > 0:
        assert printed.startswith("+") and x > 0, f"{value} printed {printed}"
    else:
        assert printed.startswith("+") and x == 0, f"{value} printed {printed}"
    assert abs(x - value) <= 0.5 * 10 ** -_decimals(printed) + 1e-12, f"{value} printed {printed}"
