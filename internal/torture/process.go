package torture

import (
	"encoding/json"
	"fmt"
	"os"
)

// WorkerEnv names the environment variable that makes the test binary run
// as a worker process: its value is the path of the WorkerConfig file.
const WorkerEnv = "DLOCK_TORTURE_WORKER"

// RunProcess is the body of a worker process (the test binary re-executed
// by the coordinator): it runs the worker its config file describes and
// returns the exit status. The process records into its own history file;
// SIGSTOP, SIGCONT and SIGKILL from the coordinator are part of the test.
func RunProcess(cfgPath string) int {
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var cfg WorkerConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	w, err := NewWorker(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	w.Run()
	w.Close()
	return 0
}
