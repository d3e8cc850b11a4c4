package projection

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestIDWindowAgainstModel pushes ids, many of them again, into windows of
// several sizes and holds every lookup and age to a model: the last size
// pushes, where an id is found with its newest content hash.
func TestIDWindowAgainstModel(t *testing.T) {
	for _, size := range []int{1, 2, 3, 15, 16, 17, 100, 1024} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(size), 7))
			var w idWindow
			type push struct {
				id   string
				hash uint64
			}
			var model []push
			pool := 3*size + 5 // ids repeat, within the window and beyond it
			for step := range 20 * size {
				id := fmt.Sprintf("evt-%d", rng.IntN(pool))
				hash := rng.Uint64()
				w.push(id, hash, size)
				left := ""
				if model = append(model, push{id, hash}); len(model) > size {
					left, model = model[0].id, model[1:]
				}
				// The id pushed, the oldest, the one that left, and a few others; every
				// id of the pool, in the window or not, once a window.
				check := []int{rng.IntN(pool), rng.IntN(pool), rng.IntN(pool)}
				if step%size == 0 {
					check = check[:0]
					for i := range pool {
						check = append(check, i)
					}
				}
				queried := []string{id, model[0].id}
				if left != "" {
					queried = append(queried, left)
				}
				for _, i := range check {
					queried = append(queried, fmt.Sprintf("evt-%d", i))
				}
				for _, id := range queried {
					want, wantOK, wantAge := uint64(0), false, -1
					for k := len(model) - 1; k >= 0; k-- {
						if model[k].id == id {
							if !wantOK {
								want, wantOK = model[k].hash, true
							}
							wantAge = len(model) - 1 - k // the oldest push's age
						}
					}
					got, ok := w.lookup(id)
					if ok != wantOK || got != want {
						t.Fatalf("step %d: lookup(%s) = %#x, %v; want %#x, %v", step, id, got, ok, want, wantOK)
					}
					if age := w.age(id); age != wantAge {
						t.Fatalf("step %d: age(%s) = %d, want %d", step, id, age, wantAge)
					}
				}
			}
			if len(w.ring) != size || cap(w.ring) != size {
				t.Errorf("a full window's ring has length %d and capacity %d, want %d", len(w.ring), cap(w.ring), size)
			}
		})
	}
}

// TestIDWindowEmpty: a window of size 0 holds nothing, and an empty one
// finds nothing.
func TestIDWindowEmpty(t *testing.T) {
	var w idWindow
	if _, ok := w.lookup("a"); ok || w.age("a") != -1 {
		t.Error("an empty window found an id")
	}
	w.push("a", 1, 0)
	if _, ok := w.lookup("a"); ok || len(w.ring) != 0 {
		t.Error("a window of size 0 kept an id")
	}
}

func BenchmarkIDWindow(b *testing.B) {
	ids := make([]string, 4096)
	for i := range ids {
		ids[i] = fmt.Sprintf("01JEVENT%018d", i)
	}
	var w idWindow
	for i := 0; b.Loop(); i++ {
		id := ids[i%len(ids)]
		if _, ok := w.lookup(id); !ok {
			w.push(id, uint64(i), DefaultDedupeWindow)
		}
	}
}
