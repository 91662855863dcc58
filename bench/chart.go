package bench

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Series is one set of bars in a chart, one value per category.
type Series struct {
	Name   string
	Values []float64 // NaN or ≤ 0: no bar
}

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

// LogBars draws horizontal bars on a logarithmic x axis (the values span
// orders of magnitude), one row per category, one bar per series, each
// labelled with its value, and saves the chart as an SVG file.
func LogBars(path, title, xlabel string, categories []string, series []Series, format func(float64) string) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true

	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range series {
		for _, v := range s.Values {
			if v > 0 && !math.IsNaN(v) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	// Bars start a decade below the smallest value; room right for labels.
	base := math.Pow(10, math.Floor(math.Log10(lo))-0.3)
	p.X.Min, p.X.Max = base, hi*20

	n := len(categories)
	ns := len(series)
	h := 0.8 / float64(ns)
	var labels plotter.XYLabels
	for si, s := range series {
		col := palette[si%len(palette)]
		var thumb *plotter.Polygon
		for ci := range categories {
			if ci >= len(s.Values) {
				continue
			}
			v := s.Values[ci]
			if !(v > 0) {
				continue
			}
			// Category 0 at the top.
			y := float64(n-1-ci) + 0.4 - h*float64(si) - h/2
			poly, err := plotter.NewPolygon(plotter.XYs{
				{X: base, Y: y - h*0.45}, {X: v, Y: y - h*0.45},
				{X: v, Y: y + h*0.45}, {X: base, Y: y + h*0.45},
			})
			if err != nil {
				return err
			}
			poly.Color = col
			poly.LineStyle.Width = 0
			p.Add(poly)
			thumb = poly
			labels.XYs = append(labels.XYs, plotter.XY{X: v, Y: y})
			labels.Labels = append(labels.Labels, " "+format(v))
		}
		if thumb != nil && ns > 1 {
			p.Legend.Add(s.Name, thumb)
		}
	}
	if len(labels.XYs) > 0 {
		l, err := plotter.NewLabels(labels)
		if err != nil {
			return err
		}
		for i := range l.TextStyle {
			l.TextStyle[i].YAlign = -0.5
			l.TextStyle[i].Font.Size = vg.Points(8)
		}
		p.Add(l)
	}
	var ticks plot.ConstantTicks
	for ci, c := range categories {
		ticks = append(ticks, plot.Tick{Value: float64(n - 1 - ci), Label: c})
	}
	p.Y.Tick.Marker = ticks
	p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4
	height := vg.Length(60+float64(n)*float64(max(ns, 1))*14+float64(n)*10) * vg.Points(1)
	if err := p.Save(7*vg.Inch, max(height, 2.5*vg.Inch), path); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	return nil
}
