package main

import (
	"testing"

	"github.com/dlockio/dlock/internal/redistest"
)

func TestFencingExample(t *testing.T) {
	t.Setenv("REDIS_URL", redistest.Start(t).URL())
	if err := run(); err != nil {
		t.Fatalf("run() = %v", err)
	}
}
