package dlockrueidis

import (
	"flag"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// aloneEnv names the test that a child process of the test binary runs.
const aloneEnv = "DLOCK_TEST_ALONE"

// Alone runs the calling test by itself in a child process of the test
// binary, in parallel with this binary's other tests, and reports true:
// the caller then returns. In the child it reports false and the test runs
// its body. It is for a test that reads state of the whole process (every
// goroutine, a package-level record) that other tests would disturb.
// (Exported for the external test package.)
func Alone(t *testing.T) bool {
	t.Helper()
	if os.Getenv(aloneEnv) == t.Name() {
		return false
	}
	t.Parallel()
	args := []string{"-test.run=^" + t.Name() + "$", "-test.count=1",
		"-test.short=" + strconv.FormatBool(testing.Short()), "-test.v=" + strconv.FormatBool(testing.Verbose())}
	if d, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout="+time.Until(d).Round(time.Second).String())
	}
	flag.Visit(func(f *flag.Flag) { // this binary's own flags: -torture.seed, -full
		if !strings.HasPrefix(f.Name, "test.") {
			args = append(args, "-"+f.Name+"="+f.Value.String())
		}
	})
	cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
	cmd.Env = append(os.Environ(), aloneEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	quoted := "| " + strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "\n| ") // (not read as this binary's results)
	if err != nil || strings.Contains(string(out), "no tests to run") {
		t.Fatalf("%s in a process of its own: %v\n%s", t.Name(), err, quoted)
	}
	if testing.Verbose() {
		t.Logf("%s in a process of its own:\n%s", t.Name(), quoted)
	}
	return true
}
