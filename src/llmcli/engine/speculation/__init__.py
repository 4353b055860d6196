"""Speculative decoding, in one place: what proposes tokens and how many (`proposal.py`: prompt
lookup, the adaptive k policy, the `--spec-type` names), one request's speculation (`run.py`:
`Speculation`, the counts the readout and the record show), the draft model and its vocabulary
check (`draft.py`), and `--spec-exact`'s probe of bit-identical batch sizes with the on-disk store
of what was measured (`exact.py`). Verifying a proposal is decoding and lives with the decode loop
(`engine/decoding.py`); `LlamaEngine` builds these from `SpecOptions`. Modules are imported by
name; bench's speculation scenario (`bench/spec.py`) measures it from outside, through an engine."""
