package upstream

import (
	"net/http"
)

// search answers GET /v1/payouts/search?key=K like Stripe Search: 200 with
// {"data":[...]} always, an empty list when nothing matches, and a payout
// only SearchLag after it was made (eventual consistency).
func (p *Payments) search(w http.ResponseWriter, key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.opt.Now()
	data := []Payout{}
	for i, po := range p.payouts {
		if key != "" && po.IdempotencyKey == key && now.Sub(p.created[i]) >= p.opt.SearchLag {
			data = append(data, po)
		}
	}
	answer(w, http.StatusOK, map[string]any{"object": "search_result", "data": data})
}

// byID answers GET /v1/payouts/{id}: the payout, or 404.
func (p *Payments) byID(w http.ResponseWriter, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, po := range p.payouts {
		if po.ID == id {
			answer(w, http.StatusOK, po)
			return
		}
	}
	answer(w, http.StatusNotFound, map[string]string{"error": "no_such_payout"})
}

// byKeyLocked is the ID of the payout made under key ("" if none); p.mu is held.
func (p *Payments) byKeyLocked(key string) string {
	for _, po := range p.payouts {
		if po.IdempotencyKey == key {
			return po.ID
		}
	}
	return ""
}
