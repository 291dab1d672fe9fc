package dlockvalkey

import "flag"

// -full runs the whole driver table and the fault checker's long budget
// (make test-valkey passes it); without it, this copy of dlockrueidis's
// tests runs a smoke subset of the table and a short budget (FullTier).
var _ = flag.Bool("full", false, "run the whole driver table and the fault checker's long budget")
