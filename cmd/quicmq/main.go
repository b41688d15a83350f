// Command quicmq is the single QuicMQ binary: a broker node, a local development mesh, and the
// client tools (pub, sub, topics, consumers).
//
// Every subcommand parses its own flags with a flag.FlagSet, prints its usage on standard
// output when asked (-h, --help, quicmq help CMD), and reports errors on standard error as one
// line saying what is wrong and what to do (a flag error adds one line pointing at -h).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand. run gets the arguments after the subcommand's name and returns
// an error to print; errUsage-wrapped errors also print the usage.
type command struct {
	summary string
	run     func(ctx context.Context, env *env, args []string) error
}

// env is what a subcommand may touch of the process, so tests can run commands in-process.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// getenv reads the client settings' environment variables (QUICMQ_SERVER ...); nil: an
	// empty environment, so in-process tests do not depend on the shell that runs them.
	getenv func(string) string
}

// lookupEnv returns the environment variable name, "" when unset or without getenv.
func (e *env) lookupEnv(name string) string {
	if e.getenv == nil {
		return ""
	}
	return e.getenv(name)
}

var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, env *env, args []string) error) {
	commands[name] = command{summary: summary, run: run}
}

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "node" || os.Args[1] == "dev") {
		hugepagesReexec(os.Args) // hugepages.go: returns unless it executes the node again
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(runMain(ctx, &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}, os.Args[1:]))
}

func runMain(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		usage(e.stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(e.stdout)
		return 0
	case "--version", "-version":
		args = []string{"version"}
	case "help":
		if len(args) == 1 {
			usage(e.stdout)
			return 0
		}
		if _, ok := commands[args[1]]; !ok {
			fmt.Fprintf(e.stderr, "quicmq help: unknown command %q\nrun 'quicmq help' for the commands\n", args[1])
			return 2
		}
		args = []string{args[1], "-h"}
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(e.stderr, "quicmq: unknown command %q\nrun 'quicmq help' for the commands\n", args[0])
		return 2
	}
	err := cmd.run(ctx, e, args[1:])
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(e.stderr, "quicmq %s: %v\nrun 'quicmq %s -h' for help\n", args[0], strings.TrimPrefix(err.Error(), errUsage.Error()+": "), args[0])
		return 2
	default:
		fmt.Fprintf(e.stderr, "quicmq %s: %v\n", args[0], err)
		return 1
	}
}

// errUsage marks errors in how a command was called (flags, arguments).
var errUsage = errors.New("usage")

// usageError wraps a message as a usage error.
func usageError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// flagSyntaxError is the usage error of a topic or pattern flag that routing refused: it is
// told before any connection is made, in the grammar's words without the package prefix.
func flagSyntaxError(flag string, err error) error {
	return usageError("%s: %s", flag, strings.TrimPrefix(err.Error(), "routing: "))
}

// newFlagSet returns a FlagSet whose Usage prints the command's help on the env's stdout
// (help asked for is output, not an error) and that returns errors instead of exiting. The
// flag package's own printing is silenced: parseFlags reports a parse error once, and runMain
// adds one line pointing at -h instead of the whole help.
func newFlagSet(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fs.SetOutput(e.stdout)
		defer fs.SetOutput(io.Discard)
		fmt.Fprintf(e.stdout, "usage: quicmq %s %s\n\n%s\n\nflags:\n", name, synopsis, commands[name].summary)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and refuses positional arguments, which most commands do not take.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := parseOnly(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// parseInterspersed parses args allowing flags after positional arguments
// ("pub 'hello' --topic t"), and returns the positional ones; after "--" everything is
// positional, so a payload may start with '-'.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseOnly(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if i := len(args) - len(rest); i > 0 && args[i-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// parseOnly parses args, prints the help on -h (and only then), and leaves positional
// arguments to the caller.
func parseOnly(fs *flag.FlagSet, args []string) error {
	usage := fs.Usage
	fs.Usage = func() {} // the flag package calls it on errors too
	err := fs.Parse(args)
	fs.Usage = usage
	if errors.Is(err, flag.ErrHelp) {
		fs.Usage()
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: quicmq <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'quicmq help <command>' (or 'quicmq <command> -h') for a command's flags; 'quicmq --version' for the build.")
}
