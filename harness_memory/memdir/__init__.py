"""memdir: memory files, the MEMORY.md index and manifest, and one place as a directory."""

from . import stored
from .directory import MemoryDir, ReadResult
from .index import CappedText, Manifest, ManifestEntry, cap_index, index_line, parse_index, render_index
from .model import (
    FORMAT_RULE,
    FRONTMATTER_EXAMPLE,
    Filled,
    MemoryFile,
    MemoryType,
    fill_missing_fields,
    fill_missing_type,
    parse_memory,
    quote_plain_values,
    split_frontmatter,
)
from .txn import ABSENT, PlaceTxn, SaveResult, TxnResult, is_state_file

__all__ = [
    "ABSENT",
    "FORMAT_RULE",
    "FRONTMATTER_EXAMPLE",
    "CappedText",
    "Filled",
    "Manifest",
    "ManifestEntry",
    "MemoryDir",
    "MemoryFile",
    "MemoryType",
    "PlaceTxn",
    "ReadResult",
    "SaveResult",
    "TxnResult",
    "cap_index",
    "fill_missing_fields",
    "fill_missing_type",
    "index_line",
    "is_state_file",
    "parse_index",
    "parse_memory",
    "quote_plain_values",
    "render_index",
    "split_frontmatter",
    "stored",
]
