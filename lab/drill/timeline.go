package drill

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var (
	colFalse404 = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	col503      = color.RGBA{R: 255, G: 127, B: 14, A: 255}
	colPeer     = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	colAll      = color.RGBA{R: 140, G: 140, B: 140, A: 255}
	colShade    = color.RGBA{R: 230, G: 230, B: 240, A: 255}
)

// WriteTimeline draws one panel per mode: answers per second over the
// drill — false 404s, 503s, routed to a peer, all — with the phases shaded.
func WriteTimeline(path string, results []*Result) error {
	const w, rowH = 28 * vg.Centimeter, 9 * vg.Centimeter
	img := vgimg.New(w, rowH*vg.Length(len(results)))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(results), Cols: 1, PadY: vg.Centimeter}
	for i, r := range results {
		p, err := timelinePlot(r)
		if err != nil {
			return err
		}
		p.Draw(tiles.At(dc, 0, i))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

func timelinePlot(r *Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = r.Mode
	p.X.Label.Text = "seconds since the drill started"
	p.Y.Label.Text = "answers per second"
	secs := int(r.End.Sub(r.Start).Seconds()) + 1
	series := map[string][]float64{}
	for _, k := range []string{"all", False404, Unavailable, "peer"} {
		series[k] = make([]float64, secs)
	}
	for _, e := range r.events {
		s := int(e.at.Sub(r.Start).Seconds())
		if s < 0 || s >= secs {
			continue
		}
		series["all"][s]++
		if e.outcome == False404 || e.outcome == Unavailable {
			series[e.outcome][s]++
		}
		if e.route == "peer" {
			series["peer"][s]++
		}
	}
	ymax := 1.0
	for _, v := range series["all"] {
		ymax = max(ymax, v)
	}
	if err := shadePhases(p, r, ymax); err != nil {
		return nil, err
	}
	for _, l := range []struct {
		key, name string
		c         color.Color
		width     vg.Length
	}{{"all", "all answers", colAll, 1}, {"peer", "routed to a peer", colPeer, 1.5}, {Unavailable, "503", col503, 2}, {False404, "false 404", colFalse404, 2.5}} {
		pts := make(plotter.XYs, secs)
		for i, v := range series[l.key] {
			pts[i] = plotter.XY{X: float64(i), Y: v}
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		line.Color, line.Width = l.c, l.width
		p.Add(line)
		p.Legend.Add(l.name, line)
	}
	p.Legend.Top = true
	p.Y.Min, p.Y.Max = 0, ymax*1.25
	return p, nil
}

// shadePhases shades every other phase and names each at the top.
func shadePhases(p *plot.Plot, r *Result, ymax float64) error {
	var labels plotter.XYLabels
	for i, ph := range r.Phases {
		x0, x1 := ph.Start.Sub(r.Start).Seconds(), ph.End.Sub(r.Start).Seconds()
		if i%2 == 1 {
			poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: 0}, {X: x1, Y: 0}, {X: x1, Y: ymax * 1.25}, {X: x0, Y: ymax * 1.25}})
			if err != nil {
				return err
			}
			poly.Color, poly.LineStyle.Width = colShade, 0
			p.Add(poly)
		}
		labels.XYs = append(labels.XYs, plotter.XY{X: x0, Y: ymax * (1.2 - 0.06*float64(i%2))})
		labels.Labels = append(labels.Labels, shortPhase(ph.Name))
	}
	l, err := plotter.NewLabels(labels)
	if err != nil {
		return err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].Font.Size = vg.Points(7)
	}
	p.Add(l)
	return nil
}

func shortPhase(s string) string {
	if len(s) > 18 {
		return s[:18]
	}
	return s
}
