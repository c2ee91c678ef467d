package bench

import (
	"fmt"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WriteChart draws the sequential latencies' distributions, one panel per
// route, as a PNG.
func WriteChart(file string, r *Report) error {
	var panels []*plot.Plot
	for _, route := range []string{"local", "peer"} {
		p, err := r.cdf(route)
		if err != nil {
			return err
		}
		panels = append(panels, p)
	}
	img := vgimg.New(24*vg.Centimeter, 10*vg.Centimeter)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Centimeter, PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3}
	canvases := plot.Align([][]*plot.Plot{panels}, tiles, dc)
	for i, p := range panels {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", file, err)
	}
	return f.Close()
}

// cdf is one route's panel: for each path, the fraction of GETs answered
// within a latency, up to the 99th percentile.
func (r *Report) cdf(route string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = route + " route: sequential GETs"
	p.X.Label.Text = "latency (µs)"
	p.Y.Label.Text = "fraction answered"
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top, p.Legend.Left = false, false
	i := 0
	for _, path := range r.Config.Paths {
		lat := r.Latency[path.Key()]
		if path.Route != route || len(lat) == 0 {
			continue
		}
		upTo := int(0.99 * float64(len(lat)))
		pts := make(plotter.XYs, upTo)
		for j := range pts {
			pts[j].X, pts[j].Y = micros(lat[j]), float64(j+1)/float64(len(lat))
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color, l.Width = plotutil.Color(i), vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(path.Name, l)
		i++
	}
	p.Add(plotter.NewGrid())
	return p, nil
}
