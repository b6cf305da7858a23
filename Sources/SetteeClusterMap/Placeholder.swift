// Placeholder so the target builds; replaced by its implementation.
