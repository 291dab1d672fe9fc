package dlock_test

// Adversary 5: attacks on Semaphore.AcquireN, AcquireParts, Lock.Context and
// the restructured scripts (fair release handover). Run with
//   go test -race -count=1 -run 'TestAdv5' .
