"""Media I/O: decoding audio and images, writing MP4 files."""
