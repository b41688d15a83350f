package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var palette = map[string]color.Color{
	"quicmq":    color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 255},
	"ablation":  color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 255},
	"nats":      color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 255},
	"jetstream": color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 255},
	"quic-only": color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 255},
}

func colorOf(sys string) color.Color {
	if c, ok := palette[sys]; ok {
		return c
	}
	return color.Black
}

// representative is the run of a group whose p99 is the median of the group's.
func representative(g []*runResult) *runResult {
	if len(g) == 0 {
		return nil
	}
	m := median(func() []float64 {
		var v []float64
		for _, r := range g {
			v = append(v, r.P99)
		}
		return v
	}()).med
	for _, r := range g {
		if r.P99 == m {
			return r
		}
	}
	return g[0]
}

// plotAll writes the latency tail plots (one per loss rate, or per slow/baseline) and the
// stall timelines (one per loss rate above zero), and returns their paths.
func plotAll(rs []*runResult, prefix string, losses []float64, systems []string, slow bool) ([]string, error) {
	var files []string
	if slow {
		p := tailPlot("slow consumer: the other subscriptions' latency (dashed: one subscription stalled)")
		for _, sys := range systems {
			for _, sl := range []int{0, 1} {
				r := representative(pick(rs, func(r *runResult) bool { return r.System == sys && r.Slow == sl }))
				if r == nil {
					continue
				}
				label := sys
				if sl == 1 {
					label += " + slow"
				}
				if err := addTail(p, r, label, sl == 1); err != nil {
					return files, err
				}
			}
		}
		f := prefix + "-latency.png"
		if err := p.Save(7*vg.Inch, 4.5*vg.Inch, f); err != nil {
			return files, err
		}
		files = append(files, f)
		var reps []*runResult
		for _, sys := range systems {
			if r := representative(pick(rs, func(r *runResult) bool { return r.System == sys && r.Slow == 1 })); r != nil {
				reps = append(reps, r)
			}
		}
		if len(reps) > 0 {
			f := prefix + "-stalls.png"
			if err := stallTimeline(reps, "subscription 0 stalled", f); err != nil {
				return files, err
			}
			files = append(files, f)
		}
		return files, nil
	}
	for _, loss := range losses {
		p := tailPlot(fmt.Sprintf("fan-out, %.1f%% loss: latency tail (100 subscriptions, 1 connection)", loss*100))
		var reps []*runResult
		for _, sys := range systems {
			r := representative(pick(rs, func(r *runResult) bool { return r.System == sys && r.Loss == loss }))
			if r == nil {
				continue
			}
			reps = append(reps, r)
			if err := addTail(p, r, sys, false); err != nil {
				return files, err
			}
		}
		f := fmt.Sprintf("%s-latency-loss%.1f.png", prefix, loss*100)
		if err := p.Save(7*vg.Inch, 4.5*vg.Inch, f); err != nil {
			return files, err
		}
		files = append(files, f)
		if loss > 0 && len(reps) > 0 {
			f := fmt.Sprintf("%s-stalls-loss%.1f.png", prefix, loss*100)
			if err := stallTimeline(reps, fmt.Sprintf("%.1f%% loss", loss*100), f); err != nil {
				return files, err
			}
			files = append(files, f)
		}
	}
	return files, nil
}

func tailPlot(title string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "latency, publish to delivery (ms, log)"
	p.Y.Label.Text = "fraction of records slower (log)"
	p.X.Scale = plot.LogScale{}
	p.Y.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = false
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p
}

// addTail draws 1-quantile against latency: p99 is where the line crosses 0.01.
func addTail(p *plot.Plot, r *runResult, label string, dashed bool) error {
	var xy plotter.XYs
	for _, c := range r.CDF {
		y := 1 - c[1]
		if y <= 0 {
			continue
		}
		xy = append(xy, plotter.XY{X: math.Max(c[0], 0.01), Y: y})
	}
	if len(xy) == 0 {
		return nil
	}
	l, err := plotter.NewLine(xy)
	if err != nil {
		return err
	}
	l.Color = colorOf(r.System)
	l.Width = vg.Points(1.5)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	p.Add(l)
	p.Legend.Add(fmt.Sprintf("%s (p99 %s ms)", label, fmtNum(r.P99)), l)
	return nil
}

// stallTimeline draws, per system, every stall over 50 ms: when it ended (x), which
// subscription (y), and how long it was (dot size).
func stallTimeline(reps []*runResult, what string, file string) error {
	rows := len(reps)
	plots := make([][]*plot.Plot, rows)
	for i, r := range reps {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s, %s: %d stalls > 50 ms, longest %s ms", r.System, what, r.Stalls, fmtNum(r.LongestStall))
		p.X.Label.Text = "seconds into the window"
		p.Y.Label.Text = "subscription"
		p.X.Min, p.X.Max = 0, r.Duration.Seconds()+1
		p.Y.Min, p.Y.Max = 0, float64(r.Subs)
		var xyz plotter.XYZs
		for _, e := range r.StallEvents {
			xyz = append(xyz, plotter.XYZ{X: e[1], Y: e[0], Z: e[2]})
		}
		if len(xyz) > 0 {
			s, err := plotter.NewScatter(plotter.XYZs(xyz))
			if err != nil {
				return err
			}
			s.GlyphStyleFunc = func(i int) draw.GlyphStyle {
				rad := vg.Points(1.5 + math.Min(6, xyz[i].Z/100))
				return draw.GlyphStyle{Color: colorOf(r.System), Radius: rad, Shape: draw.CircleGlyph{}}
			}
			p.Add(s)
		}
		plots[i] = []*plot.Plot{p}
	}
	img := vgimg.New(7*vg.Inch, vg.Length(rows)*2.2*vg.Inch)
	dc := draw.New(img)
	canvases := plot.Align(plots, draw.Tiles{Rows: rows, Cols: 1, PadY: vg.Points(6)}, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
	return err
}

// groupedBarPlot draws, for each group (a set of parameters, on the X axis), one bar per
// series (a system) in the series' colour, with a legend: values[i][j] is series i in group j,
// NaN for none (no bar). It is for scenarios that compare systems under several parameters.
func groupedBarPlot(title, ylabel string, groups, series []string, values [][]float64, file string) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	const width = 14
	for i, name := range series {
		vals := make(plotter.Values, len(groups))
		for j := range groups {
			if v := values[i][j]; !math.IsNaN(v) {
				vals[j] = v
			}
		}
		bars, err := plotter.NewBarChart(vals, vg.Points(width))
		if err != nil {
			return err
		}
		bars.Color = colorOf(name)
		bars.LineStyle.Width = 0
		bars.Offset = vg.Points(width * (float64(i) - float64(len(series)-1)/2))
		p.Add(bars)
		p.Legend.Add(name, bars)
	}
	p.NominalX(groups...)
	p.Add(plotter.NewGrid())
	// Room for the legend (a row per series) above the bars, and for the outer bars of the
	// first and last group.
	top := 0.0
	for _, row := range values {
		for _, v := range row {
			if !math.IsNaN(v) {
				top = max(top, v)
			}
		}
	}
	p.Y.Min, p.Y.Max = 0, max(1, top)*(1.15+0.07*float64(len(series)))
	p.Y.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		ticks := plot.DefaultTicks{}.Ticks(lo, hi)
		for i := range ticks {
			if ticks[i].Label != "" {
				ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'f', -1, 64)
			}
		}
		return ticks
	})
	p.X.Min, p.X.Max = -0.6, float64(len(groups))-0.4
	p.Legend.Left = true
	w := max(7, 1.5+0.3*float64(len(groups)*len(series)))
	return p.Save(vg.Length(w)*vg.Inch, 4*vg.Inch, file)
}

// saveResults writes a scenario's results as indented JSON to dir/NAME-STAMP.json (dir made
// if need be) and says where on standard error; it returns the path, beside which the
// scenario's plots go.
func saveResults(dir, name string, results any) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%s.json", name, time.Now().UTC().Format("20060102-150405")))
	b, _ := json.MarshalIndent(results, "", " ")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "results: %s\n", path)
	return path, nil
}

// plotBars draws barPlot beside the results at jsonPath (same name, .png) and says where;
// nothing when there are no values.
func plotBars(title, ylabel string, labels []string, values []float64, jsonPath string) error {
	if len(values) == 0 {
		return nil
	}
	png := strings.TrimSuffix(jsonPath, ".json") + ".png"
	if err := barPlot(title, ylabel, labels, values, png); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "plot: %s\n", png)
	return nil
}

// barPlot draws one bar per label (the median), for the publish and replay scenarios.
func barPlot(title, ylabel string, labels []string, values []float64, file string) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	bars, err := plotter.NewBarChart(plotter.Values(values), vg.Points(28))
	if err != nil {
		return err
	}
	bars.Color = palette["quicmq"]
	bars.LineStyle.Width = 0
	p.Add(bars)
	p.NominalX(labels...)
	p.Add(plotter.NewGrid())
	return p.Save(vg.Length(max(5, 1.2+0.9*float64(len(labels))))*vg.Inch, 4*vg.Inch, file)
}
