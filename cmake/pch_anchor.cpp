// Empty translation unit that owns the precompiled header the targets reuse.
