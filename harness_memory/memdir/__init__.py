"""memdir: memory files, the MEMORY.md index and manifest, and one place as a directory."""

from .directory import MemoryDir, ReadResult, SaveResult
from .index import CappedText, Manifest, ManifestEntry, cap_index, index_line, parse_index, render_index
from .model import FRONTMATTER_EXAMPLE, MemoryFile, MemoryType, parse_memory, split_frontmatter

__all__ = [
    "FRONTMATTER_EXAMPLE",
    "CappedText",
    "Manifest",
    "ManifestEntry",
    "MemoryDir",
    "MemoryFile",
    "MemoryType",
    "ReadResult",
    "SaveResult",
    "cap_index",
    "index_line",
    "parse_index",
    "parse_memory",
    "render_index",
    "split_frontmatter",
]
