package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// qlog reads one connection's qlog trace (QLOGDIR, written by quic-go for a node, a link or
// the SDK; JSON-SEQ, one event per line) and draws what a sender's congestion control did:
// the congestion window and the bytes in flight, the packets declared lost and the probe
// timeouts, and the packets sent per 50 ms. It is how the fan-out's worst stalls at 2% loss
// were traced to the congestion window (docs/benchmarks.md).

// qlogTrace is what the plot needs of a trace; times are seconds since the trace began.
type qlogTrace struct {
	cwnd, inFlight plotter.XYs // bytes
	lost, pto      []float64   // when
	sent           []float64   // when each packet was sent
}

type qlogEvent struct {
	Time float64 `json:"time"` // milliseconds
	Name string  `json:"name"`
	Data struct {
		CongestionWindow *float64 `json:"congestion_window"`
		BytesInFlight    *float64 `json:"bytes_in_flight"`
		TimerType        string   `json:"timer_type"`
		EventType        string   `json:"event_type"`
	} `json:"data"`
}

// readQlog parses a trace, keeping events between from and to (seconds; to <= 0: the end).
func readQlog(r io.Reader, from, to float64) (*qlogTrace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	tr := &qlogTrace{}
	line, events := 0, 0
	for sc.Scan() {
		line++
		b := bytes.TrimLeft(sc.Bytes(), "\x1e \t")
		if len(b) == 0 || line == 1 { // the first record is the trace's header
			continue
		}
		var e qlogEvent
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		t := e.Time / 1000
		if t < from || (to > 0 && t > to) {
			continue
		}
		events++
		switch e.Name {
		case "recovery:metrics_updated":
			if e.Data.CongestionWindow != nil {
				tr.cwnd = append(tr.cwnd, plotter.XY{X: t, Y: *e.Data.CongestionWindow})
			}
			if e.Data.BytesInFlight != nil {
				tr.inFlight = append(tr.inFlight, plotter.XY{X: t, Y: *e.Data.BytesInFlight})
			}
		case "recovery:packet_lost":
			tr.lost = append(tr.lost, t)
		case "recovery:loss_timer_updated":
			if e.Data.TimerType == "pto" && e.Data.EventType == "expired" {
				tr.pto = append(tr.pto, t)
			}
		case "transport:packet_sent":
			tr.sent = append(tr.sent, t)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if line == 0 {
		return nil, errors.New("empty trace")
	}
	if events == 0 {
		return nil, fmt.Errorf("no event between %gs and %gs of the trace", from, to)
	}
	return tr, nil
}

func runQlog(args []string) error {
	fs := flag.NewFlagSet("qlog", flag.ExitOnError)
	in := fs.String("in", "", "a .sqlog file written with QLOGDIR set (required)")
	out := fs.String("out", "", "the PNG to write (default: the input's name with .png)")
	from := fs.Float64("from", 0, "start, in seconds since the trace began")
	to := fs.Float64("to", 0, "end, in seconds since the trace began (0: the end)")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: qmqbench qlog --in FILE.sqlog [--out FILE.png] [--from S] [--to S]\n\n"+
			"Plots a QUIC connection's congestion window, bytes in flight, lost packets, probe\n"+
			"timeouts and packets sent per 50 ms from a qlog trace (QLOGDIR=DIR quicmq node ...).\n\n")
		fs.PrintDefaults()
	}
	fs.Parse(args)
	if *in == "" {
		fs.Usage()
		return errors.New("--in is required")
	}
	if *to > 0 && *to <= *from {
		return fmt.Errorf("--to %g is not after --from %g", *to, *from)
	}
	if *out == "" {
		*out = *in + ".png"
	}
	f, err := os.Open(*in)
	if err != nil {
		return err
	}
	defer f.Close()
	tr, err := readQlog(f, *from, *to)
	if err != nil {
		return fmt.Errorf("%s: %w", *in, err)
	}
	title := filepath.Base(*in)
	if *from > 0 || *to > 0 {
		title += fmt.Sprintf(", %g-%g s", *from, *to)
	}
	if err := plotQlog(tr, title, *out); err != nil {
		return err
	}
	fmt.Printf("%d packets sent, %d declared lost, %d probe timeouts; congestion window %s-%s KB (median %s)\n%s\n",
		len(tr.sent), len(tr.lost), len(tr.pto), fmtKB(minY(tr.cwnd)), fmtKB(maxY(tr.cwnd)), fmtKB(medianY(tr.cwnd)), *out)
	return nil
}

func plotQlog(tr *qlogTrace, title, file string) error {
	lostColor := color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 255}
	top := plot.New()
	top.Title.Text = title
	top.Y.Label.Text = "KB"
	kb := func(xys plotter.XYs) plotter.XYs {
		out := make(plotter.XYs, len(xys))
		for i, p := range xys {
			out[i] = plotter.XY{X: p.X, Y: p.Y / 1000}
		}
		return out
	}
	for _, s := range []struct {
		xys   plotter.XYs
		label string
		c     color.Color
	}{{kb(tr.cwnd), "congestion window", colorOf("quicmq")}, {kb(tr.inFlight), "bytes in flight", colorOf("ablation")}} {
		if len(s.xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(s.xys)
		if err != nil {
			return err
		}
		l.Color = s.c
		l.StepStyle = plotter.PostStep
		top.Add(l)
		top.Legend.Add(s.label, l)
	}
	for _, m := range []struct {
		at    []float64
		label string
		shape draw.GlyphDrawer
	}{{tr.lost, "packet lost", draw.CrossGlyph{}}, {tr.pto, "probe timeout", draw.TriangleGlyph{}}} {
		if len(m.at) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(m.at))
		for i, t := range m.at {
			pts[i] = plotter.XY{X: t, Y: 0}
		}
		s, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		s.GlyphStyle = draw.GlyphStyle{Color: lostColor, Radius: vg.Points(3), Shape: m.shape}
		top.Add(s)
		top.Legend.Add(m.label, s)
	}
	top.Legend.Top = true

	bottom := plot.New()
	bottom.X.Label.Text = "seconds since the connection began"
	bottom.Y.Label.Text = "packets sent / 50 ms"
	if len(tr.sent) > 0 {
		const bin = 0.05
		first, last := tr.sent[0], tr.sent[len(tr.sent)-1]
		counts := make(plotter.XYs, int((last-first)/bin)+1)
		for i := range counts {
			counts[i].X = first + float64(i)*bin
		}
		for _, t := range tr.sent {
			counts[int((t-first)/bin)].Y++
		}
		l, err := plotter.NewLine(counts)
		if err != nil {
			return err
		}
		l.Color = colorOf("quicmq")
		l.StepStyle = plotter.PostStep
		bottom.Add(l)
	}
	bottom.X.Min, bottom.X.Max = top.X.Min, top.X.Max

	plots := [][]*plot.Plot{{top}, {bottom}}
	img := vgimg.New(8*vg.Inch, 5*vg.Inch)
	dc := draw.New(img)
	canvases := plot.Align(plots, draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Points(6)}, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func ys(xys plotter.XYs) []float64 {
	out := make([]float64, len(xys))
	for i, p := range xys {
		out[i] = p.Y
	}
	return out
}

func minY(xys plotter.XYs) float64 {
	if len(xys) == 0 {
		return 0
	}
	return slices.Min(ys(xys))
}

func maxY(xys plotter.XYs) float64 {
	if len(xys) == 0 {
		return 0
	}
	return slices.Max(ys(xys))
}

func medianY(xys plotter.XYs) float64 {
	if len(xys) == 0 {
		return 0
	}
	v := ys(xys)
	slices.Sort(v)
	return v[len(v)/2]
}

func fmtKB(b float64) string { return fmtNum(b / 1000) }
