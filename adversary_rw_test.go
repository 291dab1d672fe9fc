package dlock_test

// Adversary tests of the read-write lock: each one found a way to break
// what RWMutex's documentation promises, and checks the promise.
