package campaign

import judge "github.com/quicmq/quicmq/internal/campaign"

// The judge is the main module's internal/campaign (the bench module's import path is under
// github.com/quicmq/quicmq, so it may use that internal package): one judge for every
// campaign, shown failing on damaged input by its own tests.
type (
	Key    = judge.Key
	Ack    = judge.Ack
	Rec    = judge.Rec
	Report = judge.Report
)

// Payload and Check are the judge's.
var (
	Payload = judge.Payload
	Check   = judge.Check
)
