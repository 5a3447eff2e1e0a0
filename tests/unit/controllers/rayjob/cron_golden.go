package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

type tc struct {
	Zone  string `json:"zone"`
	Expr  string `json:"expr"`
	After string `json:"after"`
	N     int    `json:"n"`
}

func main() {
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	out := []map[string]any{}
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var c tc
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			panic(err)
		}
		loc, err := time.LoadLocation(c.Zone)
		if err != nil {
			panic(err)
		}
		spec := c.Expr
		res := map[string]any{"zone": c.Zone, "expr": c.Expr, "after": c.After}
		s, err := cron.ParseStandard(spec)
		if err != nil {
			res["error"] = true
			out = append(out, res)
			continue
		}
		t, err := time.ParseInLocation("2006-01-02T15:04:05.999999999", c.After, loc)
		if err != nil {
			panic(err)
		}
		nexts := []string{}
		for i := 0; i < c.N; i++ {
			t = s.Next(t)
			if t.IsZero() {
				nexts = append(nexts, "zero")
				break
			}
			nexts = append(nexts, t.Format(time.RFC3339))
		}
		res["next"] = nexts
		out = append(out, res)
	}
	b, _ := json.MarshalIndent(out, "", " ")
	fmt.Println(string(b))
}
