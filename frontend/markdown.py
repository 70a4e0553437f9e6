"""Message content as HTML: Markdown rendered by markdown-it-py, then sanitised by nh3.

Raw HTML in a message is never passed through: markdown-it escapes it (html off)
and nh3 keeps only the tags, attributes and URL schemes listed here, so a
message can neither run script nor load anything when the page shows it.
"""
from functools import lru_cache

import nh3
from markdown_it import MarkdownIt

# Shown on the page; the whole message stays in the database and the API.
DISPLAY_LIMIT = 8000

_md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable(
    ["table", "strikethrough"]
)

ALLOWED_TAGS = {
    "p", "br", "hr", "strong", "em", "del", "s", "code", "pre", "blockquote",
    "ul", "ol", "li", "a", "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tr", "th", "td",
}
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}}
URL_SCHEMES = {"http", "https", "mailto"}


@lru_cache(maxsize=4096)
def markdown_html(text: str) -> str:
    clipped = text if len(text) <= DISPLAY_LIMIT else text[:DISPLAY_LIMIT] + "\n\n… (shortened on the page)"
    return nh3.clean(
        _md.render(clipped),
        tags=ALLOWED_TAGS,
        clean_content_tags={"script", "style"},
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )
