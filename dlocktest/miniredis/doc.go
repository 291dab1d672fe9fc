// Package miniredis checks what package dlocktest says of miniredis, an
// in-memory Redis for tests: dlock's locks work on it, and its clock moves
// only when the test says so. It is a module of its own, so that dlock's
// module does not depend on miniredis.
package miniredis
