# Summarizes the alternated runs of this folder: median (range) per
# scenario set and binary. Run from this folder: python3 summarize.py
import json,glob,statistics,re
def load(f):
    d=json.load(open(f)); s=d['scenarios']; return s[0] if isinstance(s,list) else s
def med(vals): return "%.1f (%.1f-%.1f)"%(statistics.median(vals),min(vals),max(vals))
for scen in ['max','prio','p3','p4','m4','p5']:
    for v in ['old','new','lean','lean2','lean3']:
        fs=sorted(glob.glob(f'{scen}-{v}-*.json'))
        rows=[]
        for f in fs:
            try: rows.append(load(f))
            except Exception: pass
        if not rows: continue
        out=[scen,v,len(rows)]
        if scen in ('max','m4'):
            out+=['cpu/ev',med([r['projectorCpuPerEventMicros'] for r in rows])]
            out+=['rate',med([r['aggregatedConsumeRate'] for r in rows])]
        else:
            out+=['drain',med([r['baselines']['drainWithoutHumanInput'] for r in rows])]
            out+=['p99',med([r['endToEndLatency']['priority']['99pct'] for r in rows])]
            out+=['p99.9',med([r['endToEndLatency']['priority']['99.9pct'] for r in rows])]
            st=[]
            for r in rows:
                n=[x for x in r['notes'] if 'stage by stage' in x][0]
                p99={k:float(b) for k,a,b in re.findall(r'(\w+) ([\d.]+) / ([\d.]+)',n)}
                st.append(sum(p99[k] for k in ['queued','applied','built','waited']))
            out+=['own',med(st)]
        out+=['gc%',med([100*r['projectorGcCpuShare'] for r in rows])]
        out+=['rss',med([r['projectorRssBytes']/2**20 for r in rows])]
        out+=['heapmax',med([r['projectorHeapMaxBytes']/2**20 for r in rows])]
        print(*out)
