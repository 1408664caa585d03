/*
 * The fencing protocol of Fencegate, for the spin model checker.
 * README.md in this directory maps every step to the code.
 *
 * One resource; a registry (lease table, fence sequence, one loss of its
 * state, an operator's floor); two workers that may pause at any point while
 * their lease expires; two gateways (one may crash) that authorize, admit in
 * one fence-store transaction, forward the effect as a conditional write on
 * the object store's CAS chain, and settle; a network that may hold a PUT
 * back and deliver it late; and the reconciler that settles what a timeout
 * or a crash left open.
 */

#define NW     2      /* workers */
#ifndef MAXF
#define MAXF   2      /* fences the registry may hand out in all (spin -DMAXF=3 for more) */
#endif
#define MAXSEG 2      /* segments per lease */
#ifndef SENDS
#define SENDS  2      /* requests per worker */
#endif
#define NONE   255

/* registry: lease backend */
byte seq = 0;              /* the per-resource fence sequence */
byte issued = 0;           /* fences handed out, bounds the model */
byte holder = NONE;        /* the worker holding the lease */
byte leaseFence[NW];       /* each worker's current grant: fence and lease */
byte leaseId[NW];
bool held[NW];             /* the registry's view: lease HELD */
byte lids = 0;             /* lease IDs */
bool lost = false;         /* the coordination state was lost once */

/* fence store: the resource row */
byte highest = 0;
byte rowLease = 0;
byte lastSeg = 0;
bool pending = false;      /* an effect in flight (receipt PENDING or UNKNOWN) */
byte pendRid = 0;
byte pendF = 0;
byte pendS = 0;
bool forwarding = false;   /* the admitting gateway is still forwarding it */
byte version = 0;          /* the object version last committed */
byte rids = 0;             /* receipt IDs */

/* object store: one key */
byte etag = 0;
byte objRid = 0;
byte objF = 0;

/* time, as far as the protocol needs it: each admitted write expires (its
 * requests carry the expiry to the store: gateway.EffectExpiry,
 * fencegate.WithLandBy), in admission order since every write gets the same
 * effectTimeout. Receipt r's write has expired iff r <= expiredUpTo. Time
 * moves only where someone waits for it (the reconciler); an expiry nobody
 * waited for only makes the store refuse a late PUT, which is the same as
 * the network never delivering it. */
byte expiredUpTo = 0;
#define EXPIRED(r) ((r) <= expiredUpTo)
#define BIT(r) (1 << (r))

/* what the invariants watch */
byte maxApplied = 0;       /* highest fence whose write landed */
byte notApplied = 0;       /* receipts settled NOT_APPLIED / FAILED, as bits */
byte inflight = 0;         /* effects forwarded and not settled */
byte fenceLease[MAXF + 1]; /* the lease each fence was first admitted under (fences are 1..MAXF) */
bool crashed = false;

/* requests on their way to a gateway: worker, fence, lease, segment */
chan req = [1] of { byte, byte, byte, byte };
/* PUTs held back by the network: prev etag, fence, receipt */
chan late = [1] of { byte, byte, byte };

/* The conditional write (If-Match / If-None-Match on the version the gateway
 * last committed). Invariant 1: no write lands from a fence lower than one
 * that landed before it. */
inline cas_put(prev, f, rid, ok) {
	if
	:: etag == prev ->
		assert(f >= maxApplied);
		assert((notApplied & BIT(rid)) == 0);      /* invariant 4 */
		maxApplied = f;
		etag++;
		objRid = rid;
		objF = f;
		ok = true
	:: else -> ok = false
	fi
}

/* Settling a receipt: COMMITTED records the version; FAILED and NOT_APPLIED
 * give the segment number back when it is still the last one; the pending
 * mark is cleared. */
inline settle(committed, f, s, rid) {
	if
	:: committed -> version = etag
	:: else ->
		notApplied = notApplied | BIT(rid);
		if
		:: highest == f && lastSeg == s -> lastSeg--
		:: else -> skip
		fi
	fi;
	pending = false
}

proctype Worker(byte w) {
	byte f = 0, l = 0, s = 0, sends = SENDS;
end:	do
	:: atomic { holder == NONE && issued < MAXF ->      /* acquire */
		seq++; issued++; lids++;
		f = seq; l = lids; s = 1;
		holder = w; held[w] = true; leaseFence[w] = f; leaseId[w] = l }
	:: sends > 0 && s >= 1 && s <= MAXSEG ->            /* write the next segment, maybe after a pause */
		req!w, f, l, s; s++; sends--
	:: sends > 0 && s > 1 ->                            /* a duplicate, or a retry after an unknown answer */
		req!w, f, l, s - 1; sends--
	:: atomic { holder == w -> holder = NONE; held[w] = false }  /* release */
	:: sends == 0 -> break
	od
}

proctype Registry() {
end:	do
	:: atomic { holder != NONE -> held[holder] = false; holder = NONE }   /* the TTL runs out */
	:: atomic { !lost && seq > 0 ->                     /* state loss: restored from an older snapshot */
		lost = true; seq = seq - 1;
		if :: holder != NONE -> held[holder] = false :: else -> skip fi;
		holder = NONE }
	:: atomic { lost && seq < highest -> seq = highest }  /* the operator raises the floor */
	od
}

proctype Gateway(byte g) {
	byte w, f, l, s, prev, rid;
	bool admitted, ok;
end:	do
	:: req?w, f, l, s ->
		/* steps 1 and 2: authenticate, verify, status (query mode: the
		 * registry's view now), bind. A refusal writes nothing. */
		if
		:: held[w] && leaseFence[w] == f && leaseId[w] == l -> skip
		:: else -> goto next
		fi;
		/* the hop to the fence store: anything may happen meanwhile */
		admitted = false;
		atomic {                                        /* step 3: one transaction */
			/* in fencerules.Decide's order: the fence order and the lease
			 * check come first and refuse on their own; the rest sees a
			 * higher fence, or this fence under the row's lease. The lease
			 * stands for lease and operation root: one acquisition is one
			 * operation in the model. */
			if
			:: f < highest -> skip                       /* STALE_OWNER / FENCE_REGRESSION */
			:: f == highest && l != rowLease -> skip     /* FENCE_REGRESSION (DESIGN §6) */
			:: else ->
				if
				:: f >= highest && pending -> skip       /* RESOURCE_BUSY */
				:: f > highest && !pending && s == 1 ->
					highest = f; rowLease = l; lastSeg = 1; admitted = true
				:: f == highest && !pending && s == lastSeg + 1 ->
					lastSeg = s; admitted = true
				:: else -> skip                          /* replay, QUARANTINED, SEGMENT_OUT_OF_ORDER */
				fi
			fi;
			if
			:: admitted ->
				rids++; rid = rids; pending = true; pendRid = rid; pendF = f; pendS = s;
				if                                       /* invariant 5: one fence, one lease */
				:: fenceLease[f] == 0 -> fenceLease[f] = l
				:: else -> assert(fenceLease[f] == l)
				fi;
				prev = version; forwarding = true;
				inflight++;
				assert(inflight <= 1)                     /* invariant 3 */
			:: else -> skip
			fi
		}
		if
		:: !admitted -> goto next
		:: else -> skip
		fi;
		/* step 4: forward the effect */
		if
		:: atomic { !EXPIRED(rid) -> cas_put(prev, f, rid, ok); inflight--; forwarding = false; settle(ok, f, s, rid) }
		:: atomic { late!prev, f, rid; inflight--; forwarding = false }   /* timeout: UNKNOWN */
		:: atomic { !crashed -> crashed = true; inflight--; forwarding = false;
			if :: late!prev, f, rid :: true fi }; break  /* crash before or after sending */
		fi;
next:	skip;
	d_step { w = 0; f = 0; l = 0; s = 0; prev = 0; rid = 0; admitted = false; ok = false }
	od
}

/* A PUT the network held back arrives, conditional on the version it was
 * chained on; the store refuses it once it has expired. */
proctype Network() {
	byte prev, f, rid;
	bool ok;
end:	do
	:: late?prev, f, rid -> d_step {
		if
		:: !EXPIRED(rid) -> cas_put(prev, f, rid, ok)
		:: else -> skip                                  /* refused on arrival */
		fi;
		prev = 0; f = 0; rid = 0; ok = false }
	od
}



/* The reconciler settles a receipt nobody is forwarding any more from the
 * object's metadata: COMMITTED when the object carries the receipt, else
 * NOT_APPLIED once its write has expired (gateway.ObjectResolver waits the
 * orphan grace past the expiry; the model takes the store's refusal of an
 * expired write as atomic). Invariant 4: a write settled not applied never
 * lands. */
proctype Reconciler() {
end:	do
	:: atomic { pending && !forwarding ->
		if
		:: objRid == pendRid -> settle(true, pendF, pendS, pendRid)
		:: objRid != pendRid ->
			/* it waits until the write has expired: time moves on */
			if :: expiredUpTo < pendRid -> expiredUpTo = pendRid :: else -> skip fi;
			settle(false, pendF, pendS, pendRid)
		fi }
	od
}

/* Invariant 2: the highest fence never decreases. */
byte seenHighest = 0;
active proctype HighestNeverDecreases() {
end:	do
	:: atomic { highest != seenHighest -> assert(highest > seenHighest); seenHighest = highest }
	od
}

init {
	atomic {
		run Registry();
		run Worker(0); run Worker(1);
		run Gateway(0); run Gateway(1);
		run Network();
		run Reconciler()
	}
}

/* Liveness: every effect left in flight is settled. */
ltl settles { [] (pending -> <> !pending) }
