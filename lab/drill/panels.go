package drill

import (
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WritePanels draws, from the series Prometheus returned for the
// dashboard's queries over the drill window, up to six panels an operator
// would have looked at: what the dashboard showed.
func WritePanels(path string, r *Result) error {
	m := r.Monitor
	var names []string
	for _, p := range m.Panels {
		if len(m.keySeries[p.Panel]) > 0 && !slices.Contains(names, p.Panel) {
			names = append(names, p.Panel)
		}
	}
	names = keyPanels(names, 6)
	if len(names) == 0 {
		return fmt.Errorf("no dashboard query returned series to draw")
	}
	const w, rowH = 28 * vg.Centimeter, 7 * vg.Centimeter
	rows := (len(names) + 1) / 2
	img := vgimg.New(w, rowH*vg.Length(rows))
	tiles := draw.Tiles{Rows: rows, Cols: 2, PadX: vg.Centimeter, PadY: vg.Centimeter}
	dc := draw.New(img)
	for i, name := range names {
		p, err := panelPlot(name, m.keySeries[name], r)
		if err != nil {
			return err
		}
		p.Draw(tiles.At(dc, i%2, i/2))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		return err
	}
	return f.Close()
}

// keyPanels prefers the panels an operator reads first during the window.
func keyPanels(names []string, n int) []string {
	prefer := []string{"Window A", "Requests routed to peers", "skewgate's own 429s and 503s", "Steering: mode and state", "Hand-over and hand-back", "Route mix"}
	rank := func(s string) int {
		for i, p := range prefer {
			if strings.HasPrefix(s, p) {
				return i
			}
		}
		return len(prefer)
	}
	sort.SliceStable(names, func(i, j int) bool { return rank(names[i]) < rank(names[j]) })
	if len(names) > n {
		names = names[:n]
	}
	return names
}

func panelPlot(name string, series []promSeries, r *Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = name
	p.X.Label.Text = "seconds"
	if len(series) > 8 {
		series = series[:8]
	}
	for i, s := range series {
		pts := make(plotter.XYs, 0, len(s.points))
		for _, pt := range s.points {
			// histogram_quantile over no observations is NaN: a gap.
			if !math.IsNaN(pt.v) && !math.IsInf(pt.v, 0) {
				pts = append(pts, plotter.XY{X: pt.at.Sub(r.Start).Seconds(), Y: pt.v})
			}
		}
		if len(pts) == 0 {
			continue
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		line.Color = plotutil.Color(i)
		p.Add(line)
		p.Legend.Add(legend(s.labels), line)
	}
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(6)
	return p, nil
}

// legend names a series by its distinguishing labels.
func legend(labels map[string]string) string {
	var parts []string
	for _, k := range []string{"route", "server", "state", "hop", "kind", "instance", "version"} {
		if v, ok := labels[k]; ok {
			parts = append(parts, v)
		}
	}
	if len(parts) == 0 {
		return "value"
	}
	return strings.Join(parts, " ")
}
