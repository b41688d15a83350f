package main

import "fmt"

// plural is "1 record", "2 records", "0 records": every count the CLI prints goes through it.
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
