package client

// SetAfterLeaseCopy sets afterLeaseCopy for the external tests.
func SetAfterLeaseCopy(f func()) { afterLeaseCopy = f }
