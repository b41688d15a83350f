// Command quicmq is the single QuicMQ binary: a broker node, a local development mesh, and the
// client tools (pub, sub, topics).
//
// Every subcommand parses its own flags with a flag.FlagSet, prints its usage on -h, and
// reports errors as one line saying what is wrong and what to do.
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
}

var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, env *env, args []string) error) {
	commands[name] = command{summary: summary, run: run}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(runMain(ctx, &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:]))
}

func runMain(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(e.stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(e.stderr, "quicmq: unknown command %q\n\n", args[0])
		usage(e.stderr)
		return 2
	}
	err := cmd.run(ctx, e, args[1:])
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(e.stderr, "quicmq %s: %v\n(run 'quicmq %s -h' for the flags)\n", args[0], err, args[0])
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

// newFlagSet returns a FlagSet that writes its usage to the env's stderr and returns errors
// instead of exiting.
func newFlagSet(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: quicmq %s %s\n\n%s\n\nflags:\n", name, synopsis, commands[name].summary)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and refuses positional arguments, which no command takes.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return usageError("unexpected argument %q", fs.Arg(0))
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
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'quicmq <command> -h' for a command's flags.")
}
