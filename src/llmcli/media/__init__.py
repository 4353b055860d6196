"""Images a request carries: reading one (a file or stdin), what it is by its magic bytes, its size
refused from the header before anything decodes it, its hash (`image`); and where a model's
projector is (`projector`). Decoding and projecting an image is llama.cpp's (`engine/mtmd.py`)."""
